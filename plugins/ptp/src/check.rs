//! CHECK: the container veth, its addresses and routes as recorded in prevResult (as the
//! reference), plus what the reference leaves out: the host end is its peer, holds the
//! gateway addresses and the host routes, and the masquerade rules exist.

use attach::check;
use attach::ipam::Ipam;
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::{Family, Kernel, Link, Netlink};

use crate::config::NetConf;
use crate::error::PtpError;
use attach::netfilter::Netfilter;

pub fn check<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), PtpError> {
    check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "ptp: Required prevResult missing",
        |_, cont_link, prev| {
            if !cont_link.is_kind("veth") {
                return Err(PtpError::NotVeth {
                    name: cont_link.name.clone(),
                }
                .into());
            }
            check_host_end(kernel, nf, args, conf, cont_link, prev).map_err(CniError::from)
        },
    )?;
    Ok(())
}

/// The host end: a host interface of prevResult that is the container end's peer, with the
/// gateway addresses and host routes; and the masquerade rules.
fn check_host_end<K: Kernel, F: Netfilter>(
    kernel: &K,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
    cont_link: &Link,
    prev: &CniResult,
) -> Result<(), PtpError> {
    let peer = cont_link.link.ok_or_else(|| PtpError::NoPeer {
        name: cont_link.name.clone(),
    })?;
    let mut host = kernel.socket()?;
    let host_veth = prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_empty())
        .filter_map(|i| host.find_link(&i.name).ok().flatten())
        .find(|l| l.index == peer && l.is_kind("veth"))
        .ok_or_else(|| PtpError::HostEndNotFound {
            ifname: args.ifname.clone(),
        })?;
    let addrs = host.addresses(Some(host_veth.index), Family::Any)?;
    let routes = host.routes(Family::Any, Some(netkit::route::TABLE_MAIN))?;
    for ip in &prev.ips {
        if let Some(gw) = ip.gateway {
            if !addrs.iter().any(|a| a.ip() == gw) {
                return Err(PtpError::GatewayNotOnHostEnd {
                    gateway: gw,
                    veth: host_veth.name.clone(),
                });
            }
        }
        let to_container = IpNetwork::from(ip.address.ip());
        if !routes
            .iter()
            .any(|r| r.dst_network() == to_container && r.oif == Some(host_veth.index))
        {
            return Err(PtpError::NoHostRoute {
                ip: ip.address.ip(),
                veth: host_veth.name.clone(),
            });
        }
    }
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
    Ok(())
}
