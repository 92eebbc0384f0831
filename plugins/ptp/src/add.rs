//! ADD: IPAM alongside a veth pair (container end born in the netns), the container addressed
//! and routed via its gateway, the gateway address and a host route on the host end, masquerade.
//! A failure undoes every step.

use std::net::IpAddr;

use attach::errors::{kernel, kernel_ctx};
use attach::rollback::{self, Rollback};
use attach::{configure, ipam, link};
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::{CniResult, Interface, IpConfig};
use libcni::skel::CmdArgs;
use netkit::netfilter::ipmasq::{self, Backend};
use netkit::packet_route::route::RouteScope;
use netkit::{sysctl, AddressOptions, Link, Netns, Route, Socket, VethSpec};

use crate::config::NetConf;

/// Index of the container interface in the result.
pub const CONTAINER_IF: usize = 1;
/// Attempts at a free random host veth name.
const VETH_NAME_ATTEMPTS: usize = 10;

pub fn add(args: &CmdArgs, conf: &NetConf) -> Result<CniResult, CniError> {
    rollback::guarded("ptp", |rb| {
        let result = add_steps(args, conf, rb)?;
        // An ADD whose result cannot be printed in the request's version must not stay.
        result.to_value(&args.cni_version)?;
        Ok(result)
    })
}

fn add_steps(args: &CmdArgs, conf: &NetConf, rb: &mut Rollback) -> Result<CniResult, CniError> {
    let mut host = Socket::new().map_err(kernel)?;
    let (netns, mut cont) = link::open_netns(&args.netns)?;

    // IPAM runs while the veth pair is made.
    let ((host_veth, cont_veth), ipam_result) =
        ipam::add_alongside(args, &conf.ipam_type, CONTAINER_IF, rb, |rb| {
            setup_veth(&mut host, &mut cont, &netns, args, conf, rb)
        })?;
    let gateways = gateways(&ipam_result.ips)?;
    enable_forwarding(&ipam_result.ips)?;
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

    configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
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
            .unwrap_or_else(|| Backend::default_for(&conf.network));
        let addrs: Vec<IpNetwork> = result.ips.iter().map(|i| i.address).collect();
        let (network, ifname, cid) = (
            conf.network.clone(),
            args.ifname.clone(),
            args.container_id.clone(),
        );
        // Registered first: a partially applied setup is still torn down.
        rb.push("masquerade", move || {
            ipmasq::teardown(&network, &ifname, &cid).map_err(|e| e.to_string())
        });
        ipmasq::setup(
            backend,
            &addrs,
            &conf.network,
            &args.ifname,
            &args.container_id,
        )
        .map_err(|e| CniError::internal(e.to_string()))?;
    }
    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    Ok(result)
}

/// The gateway of every IP: ptp routes everything through it, so IPAM must name one.
fn gateways(ips: &[IpConfig]) -> Result<Vec<IpAddr>, CniError> {
    ips.iter()
        .map(|ip| {
            ip.gateway.ok_or_else(|| {
                CniError::internal(format!(
                    "IPAM returned {} without a gateway; ptp routes the container through it",
                    ip.address
                ))
            })
        })
        .collect()
}

/// `net.ipv4.ip_forward` / `net.ipv6.conf.all.forwarding` for the families in use.
fn enable_forwarding(ips: &[IpConfig]) -> Result<(), CniError> {
    for (v6, key) in [
        (false, "net/ipv4/ip_forward"),
        (true, "net/ipv6/conf/all/forwarding"),
    ] {
        if ips.iter().any(|i| i.address.is_ipv6() == v6) {
            sysctl::write_if_different(key, "1")
                .map_err(|e| kernel_ctx(e, "Could not enable IP forwarding"))?;
        }
    }
    Ok(())
}

/// The veth pair: the container end `CNI_IFNAME` born in the netns, the host end `veth<8 hex>`
/// up, both with the MTU.
fn setup_veth(
    host: &mut Socket,
    cont: &mut Socket,
    netns: &Netns,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<(Link, Link), CniError> {
    for attempt in 0..VETH_NAME_ATTEMPTS {
        let name = link::random_veth_name()?;
        let spec = VethSpec {
            name: &name,
            peer_name: &args.ifname,
            peer_netns: Some(netns),
            mtu: conf.mtu,
            up: true,
            ..Default::default()
        };
        match host.create_veth(&spec) {
            Ok(()) => {
                let undo = name.clone();
                rb.push(format!("delete {name}"), move || {
                    Socket::new()
                        .and_then(|mut s| s.delete_link_by_name(&undo))
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                });
                // The host end never autoconfigures from router advertisements.
                let _ = sysctl::write(&format!("net/ipv6/conf/{name}/accept_ra"), "0");
                let host_veth = host.link_by_name(&name).map_err(kernel)?;
                let cont_veth = cont.link_by_name(&args.ifname).map_err(kernel)?;
                return Ok((host_veth, cont_veth));
            }
            Err(e) if e.is_exists() => {
                if cont.find_link(&args.ifname).map_err(kernel)?.is_some() {
                    return Err(CniError::internal(format!(
                        "container veth name provided ({}) already exists",
                        args.ifname
                    )));
                }
                if attempt + 1 == VETH_NAME_ATTEMPTS {
                    return Err(kernel(e));
                }
            }
            Err(e) => return Err(kernel(e)),
        }
    }
    Err(CniError::internal("failed to find a free veth name"))
}

fn host_prefix(ip: IpAddr) -> IpNetwork {
    IpNetwork::from(ip)
}

/// Replaces the connected subnet route with "gateway/32 dev X scope link" plus
/// "subnet via gateway", so all traffic goes through the gateway (the host end).
fn route_container_via_gateway(
    cont: &mut Socket,
    index: u32,
    ifname: &str,
    ips: &[IpConfig],
    gateways: &[IpAddr],
) -> Result<(), CniError> {
    for (ip, gw) in ips.iter().zip(gateways) {
        let subnet = IpNetwork::new(ip.address.network(), ip.address.prefix())
            .map_err(|e| CniError::internal(format!("invalid address {}: {e}", ip.address)))?;
        cont.delete_route(&Route::new(subnet).dev(index))
            .map_err(|e| kernel_ctx(e, format!("failed to delete route {subnet} dev {ifname}")))?;
        let mut to_gw = Route::new(host_prefix(*gw)).dev(index);
        to_gw.scope = Some(RouteScope::Link);
        to_gw.src = Some(ip.address.ip());
        let mut via_gw = Route::new(subnet).dev(index).via(*gw);
        via_gw.src = Some(ip.address.ip());
        for r in [to_gw, via_gw] {
            cont.add_route(&r).map_err(kernel)?;
        }
    }
    Ok(())
}

/// The gateway address (/32, /128) on the host end, which answers for it, and a host route
/// to each container address through the host end.
fn setup_host_end(
    host: &mut Socket,
    veth: &Link,
    ips: &[IpConfig],
    gateways: &[IpAddr],
) -> Result<(), CniError> {
    for (ip, gw) in ips.iter().zip(gateways) {
        match host.add_address(veth.index, host_prefix(*gw), &AddressOptions::default()) {
            Ok(()) => {}
            // Two IPs of one family with the same gateway.
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(kernel_ctx(
                    e,
                    format!("failed to add IP addr {gw} to {}", veth.name),
                ))
            }
        }
        let mut route = Route::new(host_prefix(ip.address.ip())).dev(veth.index);
        route.scope = Some(RouteScope::Host);
        match host.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(kernel_ctx(e, "failed to add route on host")),
        }
    }
    Ok(())
}
