//! CHECK of a prevResult against the kernel (Go `ip.ValidateExpectedInterfaceIPs`,
//! `ip.ValidateExpectedRoute` and the plugins' `validateCniContainerInterface`).

use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::{CniResult, Interface, IpConfig, Route};
use libcni::skel::CmdArgs;
use netkit::{Family, Kernel, Link, LiveKernel, Netlink, Socket};

use crate::error::AttachError;
use crate::errors::kernel;

fn fail(e: AttachError) -> CniError {
    e.into()
}

/// The prevResult a CHECK needs (`<prefix>Required prevResult missing` otherwise).
pub fn prev_result(args: &CmdArgs, missing: &str) -> Result<CniResult, CniError> {
    args.prev_result()?
        .ok_or_else(|| fail(AttachError::PrevResultMissing(missing.to_string())))
}

/// The container interface of prevResult: named `CNI_IFNAME` with `CNI_NETNS` as sandbox.
pub fn container_interface(prev: &CniResult, args: &CmdArgs) -> Result<Interface, CniError> {
    prev.interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns)
        .cloned()
        .ok_or_else(|| {
            fail(AttachError::SandboxMismatch {
                netns: args.netns.clone(),
            })
        })
}

/// The container link recorded in `intf`, found in the container and with the recorded MAC.
pub fn container_link<S: Netlink>(cont: &mut S, intf: &Interface) -> Result<Link, CniError> {
    if intf.name.is_empty() {
        return Err(fail(AttachError::InterfaceNameMissing));
    }
    let link = match cont.find_link(&intf.name).map_err(kernel)? {
        Some(l) => l,
        None => {
            return Err(fail(AttachError::InterfaceNotFound {
                name: intf.name.clone(),
            }))
        }
    };
    if intf.sandbox.is_empty() {
        return Err(fail(AttachError::InHostNamespace {
            name: link.name.clone(),
        }));
    }
    if !intf.mac.is_empty() && !intf.mac.eq_ignore_ascii_case(&link.mac_string()) {
        return Err(fail(AttachError::MacMismatch {
            name: intf.name.clone(),
            recorded: intf.mac.clone(),
            actual: link.mac_string(),
        }));
    }
    Ok(link)
}

fn prefix_of(n: &IpNetwork) -> IpNetwork {
    IpNetwork::new(n.network(), n.prefix()).unwrap_or(*n)
}

/// The tables in which the routes of `ip` may live: the main table, and the table of each
/// source rule `from <ip>/32|/128` — where sbr moves an interface's routes (a table of its
/// own per address, found by that rule, however sbr numbered it). So a chain whose sbr ran
/// after this plugin still passes this plugin's CHECK.
fn tables_of(rules: &[netkit::Rule], ip: &IpConfig) -> Vec<u32> {
    let addr = ip.address.ip();
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let mut tables = vec![netkit::route::TABLE_MAIN];
    for r in rules {
        let own = r
            .src
            .is_some_and(|s| s.ip() == addr && s.prefix() == full && r.dst.is_none());
        if own && !tables.contains(&r.table) {
            tables.push(r.table);
        }
    }
    tables
}

/// Every IP is on `link`, and a route to its prefix exists in the main table or in the
/// address's own source-routing table (see `tables_of`).
pub fn interface_ips<S: Netlink>(
    cont: &mut S,
    link: &Link,
    ips: &[IpConfig],
) -> Result<(), CniError> {
    let addrs = cont
        .addresses(Some(link.index), Family::Any)
        .map_err(kernel)?;
    let rules = cont.rules(Family::Any).map_err(kernel)?;
    let all_routes = cont.routes(Family::Any, None).map_err(kernel)?;
    for ip in ips {
        if !addrs.iter().any(|a| a.address == ip.address) {
            return Err(fail(AttachError::AddressMissing {
                address: ip.address,
                ifname: link.name.clone(),
            }));
        }
        let prefix = prefix_of(&ip.address);
        let tables = tables_of(&rules, ip);
        if !all_routes
            .iter()
            .any(|r| r.dst_network() == prefix && tables.contains(&r.table_id()))
        {
            return Err(fail(AttachError::GatewayRouteMissing {
                gateway: ip.gateway,
                ifname: link.name.clone(),
            }));
        }
    }
    Ok(())
}

/// Every route of prevResult (with its gateway when it names one) is in the main table, or
/// in the source-routing table of one of prevResult's addresses `ips` whose subnet holds the
/// gateway (any of them, for a route without one): where sbr moves it.
pub fn routes<S: Netlink>(
    cont: &mut S,
    expected: &[Route],
    ips: &[IpConfig],
) -> Result<(), CniError> {
    let rules = cont.rules(Family::Any).map_err(kernel)?;
    let all_routes = cont.routes(Family::Any, None).map_err(kernel)?;
    for r in expected {
        let dst = prefix_of(&r.dst);
        let mut tables = vec![netkit::route::TABLE_MAIN];
        for ip in ips.iter().filter(|ip| {
            ip.address.is_ipv4() == r.dst.is_ipv4() && r.gw.is_none_or(|gw| ip.address.contains(gw))
        }) {
            tables.extend(tables_of(&rules, ip));
        }
        let found = all_routes.iter().any(|k| {
            k.dst_network() == dst
                && tables.contains(&k.table_id())
                && (r.gw.is_none() || k.gateway == r.gw)
        });
        if !found {
            return Err(fail(AttachError::RouteMissing {
                dst: r.dst,
                gateway: r.gw,
            }));
        }
    }
    Ok(())
}

/// The CHECK every main plugin does: IPAM CHECK (when an IPAM plugin is set), prevResult
/// (`missing` is the error without one), the container interface of prevResult in
/// `CNI_NETNS` with its recorded MAC, `link_checks` (the plugin's own: kind, mode, master...),
/// then every IP with a route to its prefix and every route (in the main table or where sbr
/// moved it).
pub fn attachment(
    args: &CmdArgs,
    ipam_type: &str,
    missing: &str,
    link_checks: impl FnOnce(&mut Socket, &Link, &CniResult) -> Result<(), CniError>,
) -> Result<(), CniError> {
    attachment_with(
        &LiveKernel,
        &crate::ipam::ExecIpam,
        args,
        ipam_type,
        missing,
        link_checks,
    )
}

/// [`attachment`] through `kernel` and `ipam`.
pub fn attachment_with<K: Kernel, I: crate::ipam::Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    ipam_type: &str,
    missing: &str,
    link_checks: impl FnOnce(&mut K::Socket, &Link, &CniResult) -> Result<(), CniError>,
) -> Result<(), CniError> {
    let (_netns, mut cont) = crate::link::open_netns_with(kernel, &args.netns)?;
    ipam.call_if_set(args, ipam_type, "CHECK")?;
    let prev = prev_result(args, missing)?;
    let intf = container_interface(&prev, args)?;
    let link = container_link(&mut cont, &intf)?;
    link_checks(&mut cont, &link, &prev)?;
    interface_ips(&mut cont, &link, &prev.ips)?;
    routes(&mut cont, &prev.routes, &prev.ips)
}
