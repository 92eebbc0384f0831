//! Addressing the container interface from a result (Go `ipam.ConfigureIface`): IPv6 enabled
//! where an IPv6 address goes, the addresses of this interface, link up, IPv6 DAD settled when
//! there is an IPv6 gateway, then the routes, each via the first gateway of its family unless
//! it names one (beside the routes other networks gave the container to the same place).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use libcni::error::CniError;
use libcni::result::CniResult;
use netkit::packet_route::address::AddressFlags;
use netkit::{AddressOptions, Family, Kernel, LiveKernel, Netlink, Netns, Socket};

use crate::error::AttachError;
use crate::errors::kernel_ctx;

/// How long IPv6 duplicate address detection may take.
const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL: Duration = Duration::from_millis(10);

/// Configures `ifname` (in `netns`, reached through `sock`) with the IPs of `result` that
/// belong to it and with every route of `result`.
pub fn configure_iface(
    netns: &Netns,
    sock: &mut Socket,
    ifname: &str,
    result: &CniResult,
) -> Result<(), CniError> {
    configure_iface_with(&LiveKernel, netns, sock, ifname, result)
}

/// [`configure_iface`] through `kernel` (`sock` is a socket of `netns`).
pub fn configure_iface_with<K: Kernel>(
    kernel: &K,
    netns: &K::Ns,
    sock: &mut K::Socket,
    ifname: &str,
    result: &CniResult,
) -> Result<(), CniError> {
    if result.interfaces.is_empty() {
        return Err(AttachError::NoInterfaces.into());
    }
    let link = sock.link_by_name(ifname).map_err(CniError::from)?;
    let (mut v4gw, mut v6gw) = (None, None);
    let mut ipv6_enabled = false;
    for ip in &result.ips {
        let Some(idx) = ip.interface else { continue };
        if result.interfaces.get(idx).is_none_or(|i| i.name != ifname) {
            return Err(AttachError::BadInterfaceIndex {
                address: ip.address,
                ifname: ifname.to_string(),
            }
            .into());
        }
        if ip.address.is_ipv6() && !ipv6_enabled {
            enable_ipv6(kernel, netns, ifname)?;
            ipv6_enabled = true;
        }
        sock.add_address(link.index, ip.address, &AddressOptions::default())
            .map_err(|e| {
                kernel_ctx(
                    e,
                    format!("failed to add IP addr {} to {ifname:?}", ip.address),
                )
            })?;
        match ip.gateway {
            Some(gw @ IpAddr::V4(_)) if v4gw.is_none() => v4gw = Some(gw),
            Some(gw @ IpAddr::V6(_)) if v6gw.is_none() => v6gw = Some(gw),
            _ => {}
        }
    }
    sock.set_link_up(link.index)
        .map_err(|e| kernel_ctx(e, format!("failed to set {ifname:?} UP")))?;
    if v6gw.is_some() {
        settle_addresses(sock, link.index, ifname)?;
    }
    for r in &result.routes {
        let gw = r.gw.or(if r.dst.is_ipv4() { v4gw } else { v6gw });
        let mut route = netkit::Route::new(r.dst).dev(link.index);
        route.gateway = gw;
        route.priority = r.priority;
        route.mtu = r.mtu;
        route.advmss = r.advmss;
        route.table = r.table;
        route.scope = r.scope.map(Into::into);
        // Beside another network's route to the same destination (its default route), as
        // the reference adds them: a container keeps a way out when its first network goes.
        match sock.prepend_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => {
                let via = gw.map(|g| format!(" via {g}")).unwrap_or_default();
                return Err(kernel_ctx(
                    e,
                    format!("failed to add route '{}{via} dev {ifname}'", r.dst),
                ));
            }
        }
    }
    Ok(())
}

/// `disable_ipv6=0` on lo and the interface when it is set, and `keep_addr_on_down=1`, so
/// the IPv6 addresses can be added and survive a down/up.
fn enable_ipv6<K: Kernel>(kernel: &K, netns: &K::Ns, ifname: &str) -> Result<(), CniError> {
    for iface in ["lo", ifname] {
        let key = format!("net/ipv6/conf/{iface}/disable_ipv6");
        let current = match kernel.sysctl_read(netns, &key) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("failed to read sysctl {key:?}: {e}");
                continue;
            }
        };
        if current.trim() == "0" {
            continue;
        }
        kernel.sysctl_write(netns, &key, "0").map_err(|e| {
            kernel_ctx(
                e,
                format!(
                    "failed to enable IPv6 for interface {iface:?} ({key}={})",
                    current.trim()
                ),
            )
        })?;
    }
    let _ = kernel.sysctl_write_if_different(
        netns,
        &format!("net/ipv6/conf/{ifname}/keep_addr_on_down"),
        "1",
    );
    Ok(())
}

/// Waits until no IPv6 address of the link is tentative; a failed DAD is an error.
fn settle_addresses<S: Netlink>(sock: &mut S, index: u32, ifname: &str) -> Result<(), CniError> {
    let start = Instant::now();
    loop {
        let addrs = sock
            .addresses(Some(index), Family::V6)
            .map_err(CniError::from)?;
        if let Some(bad) = addrs
            .iter()
            .find(|a| a.flags.contains(AddressFlags::Dadfailed))
        {
            return Err(AttachError::DadFailed {
                address: bad.address,
                ifname: ifname.to_string(),
            }
            .into());
        }
        if !addrs
            .iter()
            .any(|a| a.flags.contains(AddressFlags::Tentative))
        {
            return Ok(());
        }
        if start.elapsed() > DAD_TIMEOUT {
            return Err(AttachError::DadTimeout {
                ifname: ifname.to_string(),
            }
            .into());
        }
        std::thread::sleep(DAD_POLL);
    }
}

/// `net.ipv4.conf.<if>.arp_notify=1` (gratuitous ARP when the link comes up or its address
/// changes) and, with `ndisc`, `net.ipv6.conf.<if>.ndisc_notify=1`; failures are ignored,
/// as in the reference (IPv6 may be off).
pub fn announce_addresses(netns: &Netns, ifname: &str, ndisc: bool) {
    announce_addresses_with(&LiveKernel, netns, ifname, ndisc)
}

/// [`announce_addresses`] through `kernel`.
pub fn announce_addresses_with<K: Kernel>(kernel: &K, netns: &K::Ns, ifname: &str, ndisc: bool) {
    let arp = format!("net/ipv4/conf/{ifname}/arp_notify");
    let _ = kernel.sysctl_write(netns, &arp, "1");
    if ndisc {
        let ndisc = format!("net/ipv6/conf/{ifname}/ndisc_notify");
        let _ = kernel.sysctl_write(netns, &ndisc, "1");
    }
}
