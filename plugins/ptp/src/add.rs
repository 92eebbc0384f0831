//! ADD: IPAM alongside a veth pair (container end born in the netns), the container addressed
//! and routed via its gateway, the gateway address and a host route on the host end, masquerade.
//! A failure undoes every step.

use std::net::IpAddr;

use attach::ipam::Ipam;
use attach::rollback::Rollback;
use attach::{configure, link};
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::{CniResult, Interface, IpConfig};
use libcni::skel::CmdArgs;
use netkit::netfilter::iptables::Family;
use netkit::packet_route::route::RouteScope;
use netkit::{AddressOptions, Kernel, Link, Netlink, Route, VethSpec};

use crate::config::NetConf;
use crate::error::PtpError;
use attach::netfilter::Netfilter;

/// Index of the container interface in the result.
pub const CONTAINER_IF: usize = 1;
/// Attempts at a free random host veth name.
const VETH_NAME_ATTEMPTS: usize = 10;

pub fn add<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, PtpError> {
    let mut rb = Rollback::default();
    let outcome = add_steps(kernel, ipam, nf, args, conf, &mut rb).and_then(|result| {
        // An ADD whose result cannot be printed in the request's version must not stay.
        result.to_value(&args.cni_version)?;
        Ok(result)
    });
    match outcome {
        Ok(result) => {
            rb.disarm();
            Ok(result)
        }
        Err(e) => {
            rb.run("ptp");
            Err(e)
        }
    }
}

fn add_steps<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, PtpError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;

    // IPAM runs while the veth pair is made.
    let ((host_veth, cont_veth), ipam_result) =
        ipam.add_alongside(args, &conf.ipam_type, CONTAINER_IF, rb, |rb| {
            setup_veth(kernel, &mut host, &mut cont, &netns, args, conf, rb).map_err(CniError::from)
        })?;
    let gateways = gateways(&ipam_result.ips)?;
    enable_forwarding(kernel, &ipam_result.ips)?;
    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![
            Interface {
                name: host_veth.name.clone(),
                mac: host_veth.mac_string(),
                ..Default::default()
            },
            link::container_interface(&cont_veth, &args.netns),
        ],
        ips: ipam_result.ips,
        routes: ipam_result.routes,
        dns: ipam_result.dns,
    };

    configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
    route_container_via_gateway(
        &mut cont,
        cont_veth.index,
        &args.ifname,
        &result.ips,
        &gateways,
    )?;
    setup_host_end(&mut host, &host_veth, &result.ips, &gateways)?;

    if conf.ip_masq {
        let backend = conf
            .ip_masq_backend
            .unwrap_or_else(|| nf.default_masquerade_backend(&conf.network));
        let addrs: Vec<IpNetwork> = result.ips.iter().map(|i| i.address).collect();
        let (undo, network, ifname, cid) = (
            nf.clone(),
            conf.network.clone(),
            args.ifname.clone(),
            args.container_id.clone(),
        );
        let sources: Vec<std::net::IpAddr> = addrs.iter().map(IpNetwork::ip).collect();
        // Registered first: a partially applied setup is still torn down (this
        // attachment's jumps only: another interface's of the same network stay).
        rb.push("masquerade", move || {
            undo.teardown_masquerade(&network, &ifname, &cid, &[Family::V4, Family::V6], &sources)
                .map_err(|e| e.to_string())
        });
        nf.setup_masquerade(
            backend,
            &addrs,
            &conf.network,
            &args.ifname,
            &args.container_id,
        )?;
    }
    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    Ok(result)
}

/// The gateway of every IP: ptp routes everything through it, so IPAM must name one.
fn gateways(ips: &[IpConfig]) -> Result<Vec<IpAddr>, PtpError> {
    ips.iter()
        .map(|ip| {
            ip.gateway.ok_or(PtpError::NoGateway {
                address: ip.address,
            })
        })
        .collect()
}

/// `net.ipv4.ip_forward` / `net.ipv6.conf.all.forwarding` for the families in use.
fn enable_forwarding<K: Kernel>(kernel: &K, ips: &[IpConfig]) -> Result<(), PtpError> {
    for (v6, key) in [
        (false, "net/ipv4/ip_forward"),
        (true, "net/ipv6/conf/all/forwarding"),
    ] {
        if ips.iter().any(|i| i.address.is_ipv6() == v6) {
            kernel
                .host_sysctl_write_if_different(key, "1")
                .map_err(|source| PtpError::Forwarding { source })?;
        }
    }
    Ok(())
}

/// The veth pair: the container end `CNI_IFNAME` born in the netns, the host end `veth<8 hex>`
/// up, both with the MTU.
fn setup_veth<K: Kernel>(
    kernel: &K,
    host: &mut K::Socket,
    cont: &mut K::Socket,
    netns: &K::Ns,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<(Link, Link), PtpError> {
    for attempt in 0..VETH_NAME_ATTEMPTS {
        let name = link::random_veth_name()?;
        let spec = VethSpec {
            name: &name,
            peer_name: &args.ifname,
            mtu: conf.mtu,
            up: true,
            ..Default::default()
        };
        match host.create_veth_described(&spec, Some(netns), cont) {
            Ok(described) => {
                // Deleting the host end takes the container end with it.
                link::undo_delete_host_with(kernel, rb, &name);
                // The host end never autoconfigures from router advertisements.
                let _ = kernel.host_sysctl_write(&format!("net/ipv6/conf/{name}/accept_ra"), "0");
                // Described by the kernel as it made them, the ends need no lookup.
                return match described {
                    Some(ends) => Ok(ends),
                    None => Ok((host.link_by_name(&name)?, cont.link_by_name(&args.ifname)?)),
                };
            }
            Err(e) if e.is_exists() => {
                if cont.find_link(&args.ifname)?.is_some() {
                    return Err(PtpError::ContainerNameTaken {
                        ifname: args.ifname.clone(),
                    });
                }
                if attempt + 1 == VETH_NAME_ATTEMPTS {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(PtpError::NoFreeVethName)
}

fn host_prefix(ip: IpAddr) -> IpNetwork {
    IpNetwork::from(ip)
}

/// Replaces the connected subnet route with "gateway/32 dev X scope link" plus
/// "subnet via gateway", so all traffic goes through the gateway (the host end).
fn route_container_via_gateway<S: Netlink>(
    cont: &mut S,
    index: u32,
    ifname: &str,
    ips: &[IpConfig],
    gateways: &[IpAddr],
) -> Result<(), PtpError> {
    for (ip, gw) in ips.iter().zip(gateways) {
        let subnet =
            IpNetwork::new(ip.address.network(), ip.address.prefix()).map_err(|source| {
                PtpError::InvalidAddress {
                    address: ip.address,
                    source,
                }
            })?;
        cont.delete_route(&Route::new(subnet).dev(index))
            .map_err(|source| PtpError::DeleteSubnetRoute {
                subnet,
                ifname: ifname.to_string(),
                source,
            })?;
        let mut to_gw = Route::new(host_prefix(*gw)).dev(index);
        to_gw.scope = Some(RouteScope::Link);
        to_gw.src = Some(ip.address.ip());
        let mut via_gw = Route::new(subnet).dev(index).via(*gw);
        via_gw.src = Some(ip.address.ip());
        for r in [to_gw, via_gw] {
            cont.add_route(&r)?;
        }
    }
    Ok(())
}

/// The gateway address (/32, /128) on the host end, which answers for it, and a host route
/// to each container address through the host end.
fn setup_host_end<S: Netlink>(
    host: &mut S,
    veth: &Link,
    ips: &[IpConfig],
    gateways: &[IpAddr],
) -> Result<(), PtpError> {
    for (ip, gw) in ips.iter().zip(gateways) {
        match host.add_address(veth.index, host_prefix(*gw), &AddressOptions::default()) {
            Ok(()) => {}
            // Two IPs of one family with the same gateway.
            Err(e) if e.is_exists() => {}
            Err(source) => {
                return Err(PtpError::GatewayAddress {
                    gateway: *gw,
                    veth: veth.name.clone(),
                    source,
                })
            }
        }
        let mut route = Route::new(host_prefix(ip.address.ip())).dev(veth.index);
        route.scope = Some(RouteScope::Host);
        match host.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(source) => return Err(PtpError::HostRoute { source }),
        }
    }
    Ok(())
}
