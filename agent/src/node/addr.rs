//! This node's underlay addresses: the lease's `PublicIP` and, on a dual-stack network,
//! `PublicIPv6` (flanneld's `--public-ip` / `--public-ipv6`, else the first global address of
//! that family on `--iface`, else on the interface of that family's default route, as flanneld
//! picks it when given neither: kube-flannel.yml's DaemonSet passes no `--iface`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netkit::packet_route::address::AddressScope;

use crate::error::AgentError;
use crate::options::Options;

/// The first global address of `family` on `iface`.
fn first_global(iface: &str, family: netkit::Family) -> Result<Option<IpAddr>, netkit::Error> {
    let mut sock = netkit::Socket::new()?;
    let link = sock.link_by_name(iface)?;
    Ok(sock
        .addresses(Some(link.index), family)?
        .into_iter()
        .find(|a| a.scope == AddressScope::Universe)
        .map(|a| a.ip()))
}

/// The interface of the main table's default route of `family`, if there is one.
fn default_route_iface(family: netkit::Family) -> Result<Option<String>, netkit::Error> {
    let mut sock = netkit::Socket::new()?;
    let oif = sock
        .routes(family, Some(netkit::route::TABLE_MAIN))?
        .into_iter()
        .filter(|r| r.dst.prefix() == 0)
        .find_map(|r| r.oif);
    oif.map(|index| sock.link_by_index(index).map(|l| l.name))
        .transpose()
}

fn from_iface(opts: &Options, family: netkit::Family, flag: &str) -> Result<IpAddr, AgentError> {
    let iface = match &opts.iface {
        Some(iface) => iface.clone(),
        None => match default_route_iface(family) {
            Ok(Some(iface)) => iface,
            Ok(None) => {
                return Err(AgentError::Usage(format!(
                    "give {flag} or --iface (the underlay address or interface): \
                     there is no default route to take the interface of"
                )))
            }
            Err(e) => {
                return Err(AgentError::Usage(format!(
                    "finding the default route's interface (no {flag} or --iface): {e}"
                )))
            }
        },
    };
    let what = if family == netkit::Family::V6 {
        "global IPv6"
    } else {
        "IPv4"
    };
    match first_global(&iface, family) {
        Ok(Some(ip)) => Ok(ip),
        Ok(None) => Err(AgentError::Usage(format!(
            "interface {iface} has no {what} address; give {flag}"
        ))),
        Err(e) => Err(AgentError::Usage(format!(
            "reading the address of --iface {iface}: {e}"
        ))),
    }
}

pub fn public_ip(opts: &Options) -> Result<Ipv4Addr, AgentError> {
    if let Some(ip) = opts.public_ip {
        return Ok(ip);
    }
    match from_iface(opts, netkit::Family::V4, "--public-ip")? {
        IpAddr::V4(ip) => Ok(ip),
        IpAddr::V6(ip) => Err(AgentError::Usage(format!(
            "--iface gave the IPv6 address {ip} where an IPv4 one is needed"
        ))),
    }
}

/// Only asked for when the network config enables IPv6.
pub fn public_ipv6(opts: &Options) -> Result<Ipv6Addr, AgentError> {
    if let Some(ip) = opts.public_ipv6 {
        return Ok(ip);
    }
    match from_iface(opts, netkit::Family::V6, "--public-ipv6")? {
        IpAddr::V6(ip) => Ok(ip),
        IpAddr::V4(ip) => Err(AgentError::Usage(format!(
            "--iface gave the IPv4 address {ip} where an IPv6 one is needed"
        ))),
    }
}
