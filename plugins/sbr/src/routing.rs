//! The kernel side of sbr: per-address tables and source rules, set up with an undo journal
//! so a failed ADD leaves the netns as it found it.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::result::IpConfig;
use netkit::route::TABLE_MAIN;
use netkit::{Family, Route, Rule, Socket};

use crate::config::Sbr;
use crate::error::SbrError;

/// The first table tried for an interface's routes (as the reference).
pub const FIRST_TABLE: u32 = 100;

/// The first table id from `candidate` on that no rule points to and no route lives in.
pub fn next_free_table(rules: &[Rule], routes: &[Route], candidate: u32) -> u32 {
    let mut table = candidate;
    while rules.iter().any(|r| r.table == table) || routes.iter().any(|r| r.table_id() == table) {
        table = table.saturating_add(1);
        if table == u32::MAX {
            break;
        }
    }
    table
}

/// Whether an interface route goes with `ip` into its table: its source or gateway is in
/// the address's subnet, or it has neither (a plain device route), as the reference decides.
pub fn goes_with(ip: &IpConfig, route: &Route) -> bool {
    let inside = |a: Option<IpAddr>| a.is_some_and(|a| ip.address.contains(a));
    inside(route.src) || inside(route.gateway) || (route.src.is_none() && route.gateway.is_none())
}

/// The single-address source selector of a rule.
pub fn host_network(ip: IpAddr) -> IpNetwork {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    // A full-length prefix is always valid.
    IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip))
}

fn default_route(ip: IpAddr, gateway: IpAddr, oif: u32, table: u32) -> Route {
    let any: IpNetwork = if ip.is_ipv4() {
        IpNetwork::new(IpAddr::from([0u8; 4]), 0)
    } else {
        IpNetwork::new(IpAddr::from([0u8; 16]), 0)
    }
    .unwrap_or_else(|_| IpNetwork::from(ip));
    let mut r = Route::new(any).via(gateway).dev(oif);
    r.table = Some(table);
    r
}

enum Undo {
    DeleteRule(Rule),
    DeleteRoute(Route),
    RestoreRoute(Route),
}

/// Kernel changes made so far, undone in reverse order on failure.
struct Journal<'a> {
    sock: &'a mut Socket,
    undo: Vec<Undo>,
}

impl Journal<'_> {
    fn add_rule(&mut self, rule: Rule) -> Result<(), SbrError> {
        self.sock.add_rule(&rule).map_err(SbrError::from)?;
        self.undo.push(Undo::DeleteRule(rule));
        Ok(())
    }

    fn add_route(&mut self, route: Route, replace: bool) -> Result<(), SbrError> {
        let done = if replace {
            self.sock.replace_route(&route)
        } else {
            self.sock.add_route(&route)
        };
        done.map_err(SbrError::from)?;
        self.undo.push(Undo::DeleteRoute(route));
        Ok(())
    }

    fn delete_route(&mut self, route: Route) -> Result<(), SbrError> {
        self.sock.delete_route(&route).map_err(SbrError::from)?;
        self.undo.push(Undo::RestoreRoute(route));
        Ok(())
    }

    fn roll_back(self) {
        for step in self.undo.into_iter().rev() {
            let outcome = match &step {
                Undo::DeleteRule(r) => self.sock.delete_rule(r),
                Undo::DeleteRoute(r) => self.sock.delete_route(r),
                Undo::RestoreRoute(r) => self.sock.add_route(r),
            };
            if let Err(e) = outcome {
                eprintln!("sbr: rollback: {e}");
            }
        }
    }
}

/// ADD inside the container netns (through `sock`).
pub fn add(sock: &mut Socket, sbr: &Sbr, ips: &[IpConfig], ifname: &str) -> Result<(), SbrError> {
    let mut journal = Journal {
        sock,
        undo: Vec::new(),
    };
    let outcome = match sbr.table {
        Some(table) => ips.iter().try_for_each(|ip| {
            journal.add_rule(Rule::from_source(host_network(ip.address.ip()), table))
        }),
        None => move_routes(&mut journal, sbr, ips, ifname),
    };
    match outcome {
        Ok(()) => Ok(()),
        Err(e) => {
            journal.roll_back();
            Err(e)
        }
    }
}

/// The reference's default mode: a fresh table per address with a source rule, the
/// interface's routes copied there, and the originals removed from the main table.
fn move_routes(
    journal: &mut Journal<'_>,
    sbr: &Sbr,
    ips: &[IpConfig],
    ifname: &str,
) -> Result<(), SbrError> {
    let rules = journal.sock.rules(Family::Any).map_err(SbrError::from)?;
    let all_routes = journal
        .sock
        .routes(Family::Any, None)
        .map_err(SbrError::from)?;
    let mut table = next_free_table(&rules, &all_routes, FIRST_TABLE);
    let link = journal
        .sock
        .link_by_name(ifname)
        .map_err(|source| SbrError::FindLink {
            ifname: ifname.to_string(),
            source,
        })?;
    let link_routes: Vec<Route> = all_routes
        .iter()
        .filter(|r| r.table_id() == TABLE_MAIN && r.oif == Some(link.index))
        .cloned()
        .collect();
    for ip in ips {
        let addr = ip.address.ip();
        journal.add_rule(Rule::from_source(host_network(addr), table))?;
        // The previous plugin may have put the default route in the main table only.
        if let Some(gw) = sbr.gateway_for(ip) {
            journal.add_route(default_route(addr, gw, link.index, table), false)?;
        }
        for r in link_routes.iter().filter(|r| goes_with(ip, r)) {
            let mut copy = r.clone();
            copy.table = Some(table);
            journal.add_route(copy, true)?;
        }
        table = next_free_table(&rules, &all_routes, table.saturating_add(1));
    }
    if sbr.add_source_hints {
        // Destination-based routing keeps working for sockets bound to no address.
        for ip in ips {
            let mut subnet = Route::new(ip.address).dev(link.index);
            subnet.src = Some(ip.address.ip());
            subnet.scope = Some(netkit::packet_route::route::RouteScope::Link);
            subnet.table = Some(TABLE_MAIN);
            if let Err(e) = journal.sock.replace_route(&subnet) {
                eprintln!("sbr: warning: {e}");
            }
        }
        for r in link_routes
            .into_iter()
            .filter(|r| r.scope != Some(netkit::packet_route::route::RouteScope::Link))
        {
            if let Err(e) = journal.delete_route(r) {
                eprintln!("sbr: warning: {e}");
            }
        }
    } else {
        // Deleted only now: addresses of one subnet share the routes they were copied from.
        for r in link_routes {
            journal.delete_route(r)?;
        }
    }
    Ok(())
}

/// DEL inside the container netns: removes the rules whose source is an address of
/// `ifname` (only those pointing at `table` when set). When the interface is already gone
/// its prevResult addresses are used instead. Keeps going on errors and reports the last.
pub fn del(
    sock: &mut Socket,
    table: Option<u32>,
    ifname: &str,
    prev_ips: &[IpConfig],
) -> Result<(), SbrError> {
    let rules = sock.rules(Family::Any).map_err(SbrError::from)?;
    let addresses: Vec<IpAddr> = match sock.find_link(ifname).map_err(SbrError::from)? {
        Some(link) => sock
            .addresses(Some(link.index), Family::Any)
            .map_err(SbrError::from)?
            .iter()
            .map(|a| a.ip())
            .collect(),
        None => prev_ips.iter().map(|ip| ip.address.ip()).collect(),
    };
    let mut last_error = None;
    for rule in rules
        .iter()
        .filter(|r| table.is_none_or(|t| r.table == t))
        .filter(|r| r.src.is_some_and(|s| addresses.contains(&s.ip())))
    {
        match sock.delete_rule(rule) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => last_error = Some(SbrError::from(e)),
        }
    }
    last_error.map_or(Ok(()), Err)
}

/// CHECK: every address has its source rule (into `table` when set).
pub fn check(sock: &mut Socket, table: Option<u32>, ips: &[IpConfig]) -> Result<(), SbrError> {
    let rules = sock.rules(Family::Any).map_err(SbrError::from)?;
    for ip in ips {
        let want = host_network(ip.address.ip());
        let found = rules
            .iter()
            .any(|r| r.src == Some(want) && table.is_none_or(|t| r.table == t));
        if !found {
            return Err(SbrError::RuleMissing {
                source_network: want,
                table,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, gw: Option<&str>, src: Option<&str>, table: u32) -> Route {
        let mut r = Route::new(dst.parse().unwrap());
        r.gateway = gw.map(|g| g.parse().unwrap());
        r.src = src.map(|s| s.parse().unwrap());
        r.table = Some(table);
        r
    }

    #[test]
    fn free_tables_skip_rules_and_routes() {
        let rules = vec![Rule::from_source("10.0.0.2/32".parse().unwrap(), 100)];
        let routes = vec![
            route("10.0.0.0/8", None, None, 101),
            route("0.0.0.0/0", None, None, 254),
        ];
        assert_eq!(next_free_table(&rules, &routes, 100), 102);
        assert_eq!(next_free_table(&[], &[], 100), 100);
    }

    #[test]
    fn routes_follow_the_address_they_belong_to() {
        let ip = IpConfig {
            interface: None,
            address: "10.1.0.5/24".parse().unwrap(),
            gateway: None,
        };
        assert!(goes_with(
            &ip,
            &route("10.1.0.0/24", None, Some("10.1.0.5"), 254)
        ));
        assert!(goes_with(
            &ip,
            &route("0.0.0.0/0", Some("10.1.0.1"), None, 254)
        ));
        assert!(goes_with(&ip, &route("fe80::/64", None, None, 254)));
        assert!(!goes_with(
            &ip,
            &route("0.0.0.0/0", Some("10.2.0.1"), None, 254)
        ));
        assert!(!goes_with(
            &ip,
            &route("10.9.0.0/24", None, Some("10.9.0.5"), 254)
        ));
    }

    #[test]
    fn default_routes_per_family() {
        let r = default_route(
            "fd00::2".parse().unwrap(),
            "fd00::1".parse().unwrap(),
            3,
            100,
        );
        assert_eq!(r.to_string(), "::/0 via fd00::1 dev #3 table 100");
        assert_eq!(
            host_network("10.0.0.2".parse().unwrap()).to_string(),
            "10.0.0.2/32"
        );
    }
}
