//! The VRF device and its members, in the container netns.

use std::time::Duration;

use crate::error::VrfError;
use netkit::packet_route::address::AddressScope;
use netkit::packet_route::route::RouteScope;
use netkit::route::TABLE_MAIN;
use netkit::{AddressOptions, Family, Link, Route, Socket};

use crate::config::{first_free_table, VrfConf};

/// The VRF named `name`, if it exists; an error if the name belongs to another kind of link.
fn find_vrf(sock: &mut Socket, name: &str) -> Result<Option<(Link, u32)>, VrfError> {
    match sock.find_link(name)? {
        None => Ok(None),
        Some(link) => match netkit::vrf::table_of(&link) {
            Some(table) => Ok(Some((link, table))),
            None => Err(VrfError::NotVrf(name.to_string())),
        },
    }
}

/// Creates the VRF (up), with the configured table or the first one no VRF uses.
fn create_vrf(sock: &mut Socket, conf: &VrfConf) -> Result<(Link, u32), VrfError> {
    let table = match conf.table {
        Some(t) => t,
        None => {
            let taken: Vec<u32> = sock
                .links()?
                .iter()
                .filter_map(netkit::vrf::table_of)
                .collect();
            first_free_table(&taken).ok_or(VrfError::NoFreeTable)?
        }
    };
    sock.create_vrf(&conf.name, table)
        .map_err(|source| VrfError::CreateVrf {
            name: conf.name.clone(),
            source,
        })?;
    let link = sock.link_by_name(&conf.name)?;
    if let Err(source) = sock.set_link_up(link.index) {
        let _ = sock.delete_link(link.index);
        return Err(VrfError::VrfUp {
            name: conf.name.clone(),
            source,
        });
    }
    Ok((link, table))
}

/// The routes of `link` that enslaving removes from the main table: every non-connected,
/// non-local one (scope universe).
pub fn routes_to_move(routes: &[Route], link: u32) -> Vec<Route> {
    routes
        .iter()
        .filter(|r| {
            r.table_id() == TABLE_MAIN
                && r.oif == Some(link)
                && r.scope.unwrap_or(RouteScope::Universe) == RouteScope::Universe
        })
        .cloned()
        .collect()
}

/// ADD: the VRF exists (created when missing, its table checked when given), and
/// `ifname` is moved into it with its global IPv6 addresses and its routes. A VRF this call
/// created is deleted again when a later step fails.
pub fn join(sock: &mut Socket, conf: &VrfConf, ifname: &str) -> Result<(), VrfError> {
    let (vrf, table, created) = match find_vrf(sock, &conf.name)? {
        Some((link, table)) => {
            if conf.table.is_some_and(|t| t != table) {
                return Err(VrfError::TableConflict {
                    name: conf.name.clone(),
                    table,
                });
            }
            (link, table, false)
        }
        None => {
            let (link, table) = create_vrf(sock, conf)?;
            (link, table, true)
        }
    };
    let outcome = enslave(sock, &vrf, table, ifname);
    if outcome.is_err() && created {
        if let Err(e) = sock.delete_link(vrf.index) {
            eprintln!("vrf: rollback: {e}");
        }
    }
    outcome
}

fn enslave(sock: &mut Socket, vrf: &Link, table: u32, ifname: &str) -> Result<(), VrfError> {
    let link = sock
        .link_by_name(ifname)
        .map_err(|source| VrfError::FindLink {
            ifname: ifname.to_string(),
            source,
        })?;
    if let Some(master) = link.master {
        let name = sock
            .link_by_index(master)
            .map(|m| m.name)
            .unwrap_or_else(|_| format!("index {master}"));
        return Err(VrfError::HasMaster {
            ifname: ifname.to_string(),
            master: name,
        });
    }
    // Global IPv6 addresses go when the link changes master (unless keep_addr_on_down),
    // and the main-table routes through it are flushed: both are saved and put back.
    let global_v6 = |sock: &mut Socket| -> Result<Vec<_>, VrfError> {
        Ok(sock
            .addresses(Some(link.index), Family::V6)?
            .into_iter()
            .filter(|a| a.scope == AddressScope::Universe)
            .map(|a| a.address)
            .collect())
    };
    let before = global_v6(sock)?;
    let routes = routes_to_move(&sock.routes(Family::Any, Some(TABLE_MAIN))?, link.index);
    sock.set_link_master(link.index, vrf.index)
        .map_err(|source| VrfError::SetMaster {
            vrf: vrf.name.clone(),
            ifname: ifname.to_string(),
            source,
        })?;
    let result = restore(sock, vrf, table, &link, &before, &global_v6, routes);
    if result.is_err() {
        let _ = sock.set_link_nomaster(link.index);
    }
    result
}

fn restore(
    sock: &mut Socket,
    vrf: &Link,
    table: u32,
    link: &Link,
    before: &[netkit::ipnetwork::IpNetwork],
    global_v6: &dyn Fn(&mut Socket) -> Result<Vec<netkit::ipnetwork::IpNetwork>, VrfError>,
    routes: Vec<Route>,
) -> Result<(), VrfError> {
    let after = global_v6(sock)?;
    for addr in before.iter().filter(|a| !after.contains(a)) {
        sock.add_address(link.index, *addr, &AddressOptions::default())
            .map_err(|source| VrfError::RestoreAddress {
                address: *addr,
                ifname: link.name.clone(),
                vrf: vrf.name.clone(),
                source,
            })?;
        wait_for_local_route(sock, table, link, *addr)?;
    }
    for mut r in routes {
        r.table = Some(table);
        if let Err(source) = sock.replace_route(&r) {
            return Err(VrfError::AddRoute {
                route: Box::new(r),
                source,
            });
        }
    }
    Ok(())
}

/// The kernel adds the address's host route to the VRF table asynchronously (after DAD);
/// routes through the address can only be added after it (about 2.5 s at most).
fn wait_for_local_route(
    sock: &mut Socket,
    table: u32,
    link: &Link,
    addr: netkit::ipnetwork::IpNetwork,
) -> Result<(), VrfError> {
    let mut delay = Duration::from_millis(10);
    for _ in 0..=8 {
        let found = sock
            .routes(Family::V6, Some(table))?
            .iter()
            .any(|r| r.oif == Some(link.index) && r.dst.ip() == addr.ip() && r.dst.prefix() == 128);
        if found {
            return Ok(());
        }
        std::thread::sleep(delay);
        delay *= 2;
    }
    Err(VrfError::LocalRouteMissing {
        ifname: link.name.clone(),
        table,
        address: addr,
    })
}

/// DEL: `ifname` leaves the VRF (a missing VRF or interface is fine); the VRF is deleted
/// when nothing is left in it.
pub fn leave(sock: &mut Socket, conf: &VrfConf, ifname: &str) -> Result<(), VrfError> {
    let Some((vrf, _)) = find_vrf(sock, &conf.name)? else {
        return Ok(());
    };
    if let Some(link) = sock.find_link(ifname)? {
        if link.master == Some(vrf.index) {
            sock.set_link_nomaster(link.index)
                .map_err(|source| VrfError::ResetMaster {
                    ifname: ifname.to_string(),
                    source,
                })?;
        }
    }
    if sock.links_with_master(vrf.index)?.is_empty() {
        match sock.delete_link(vrf.index) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// CHECK: the VRF exists (with the configured table) and `ifname` is in it.
pub fn verify(sock: &mut Socket, conf: &VrfConf, ifname: &str) -> Result<(), VrfError> {
    let (vrf, table) =
        find_vrf(sock, &conf.name)?.ok_or_else(|| VrfError::VrfNotFound(conf.name.clone()))?;
    if let Some(expected) = conf.table.filter(|&t| t != table) {
        return Err(VrfError::TableMismatch {
            name: conf.name.clone(),
            table,
            expected,
        });
    }
    let members = sock.links_with_master(vrf.index)?;
    if members.iter().any(|l| l.name == ifname) {
        Ok(())
    } else {
        Err(VrfError::NotMember {
            ifname: ifname.to_string(),
            vrf: conf.name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_main_table_universe_routes_of_the_link_move() {
        let mut connected = Route::new("10.0.0.0/24".parse().unwrap()).dev(3);
        connected.scope = Some(RouteScope::Link);
        connected.table = Some(TABLE_MAIN);
        let mut default = Route::new("0.0.0.0/0".parse().unwrap())
            .via("10.0.0.1".parse().unwrap())
            .dev(3);
        default.scope = Some(RouteScope::Universe);
        default.table = Some(TABLE_MAIN);
        let mut other_link = default.clone();
        other_link.oif = Some(4);
        let mut other_table = default.clone();
        other_table.table = Some(100);
        let moved = routes_to_move(&[connected, default.clone(), other_link, other_table], 3);
        assert_eq!(moved, vec![default]);
    }
}
