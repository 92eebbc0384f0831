//! One reconcile pass: resolve the underlay, compute the desired state, make sure the VXLAN
//! device is right, dump neighbours/FDB/routes once each, and apply the diff in batches.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use netkit::addr::{AddressOptions, Family};
use netkit::packet_route::address::{AddressFlags, AddressScope};
use netkit::packet_route::neighbour::NeighbourFlags;
use netkit::packet_route::{AddressFamily, RouteNetlinkMessage};
use netkit::route::{Route, TABLE_MAIN};
use netkit::vxlan_link::{VxlanOutcome, VxlanSpec};
use netkit::{neigh, Link, Socket};

use crate::batch::{Batcher, Request};
use crate::config::OverlayConfig;
use crate::desired::{desired_state, own_subnet, Desired, NodeFacts};
use crate::error::{ConfigError, Error, UnderlayError};
use crate::peers::PeerSet;
use crate::plan::{plan, Links, Observed, Op, Plan};

/// VXLAN encapsulation overhead over an IPv4 underlay (outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14).
pub const OVERHEAD_V4: u32 = 50;
/// Over an IPv6 underlay (outer header 40).
pub const OVERHEAD_V6: u32 = 70;

/// What happened to the VXLAN device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DeviceChange {
    /// Nothing was done to it (or it is not used and absent).
    #[default]
    Unchanged,
    Created,
    /// It existed with incompatible parameters (listed).
    Recreated(Vec<String>),
    /// MTU / MAC / up state / address changed in place (listed).
    Adjusted(Vec<String>),
    /// host-gw mode: a device left from another mode was removed.
    Deleted,
}

/// Counts of applied changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub neighbours_set: usize,
    pub neighbours_deleted: usize,
    pub fdb_set: usize,
    pub fdb_deleted: usize,
    pub routes_set: usize,
    pub routes_deleted: usize,
}

impl Changes {
    pub fn total(&self) -> usize {
        self.neighbours_set
            + self.neighbours_deleted
            + self.fdb_set
            + self.fdb_deleted
            + self.routes_set
            + self.routes_deleted
    }
}

/// The outcome of one pass. `error` is set when the pass could not run (bad config,
/// missing underlay, device creation failed...); `problems` lists skipped peers and single
/// failed operations, which never stop the pass.
#[derive(Debug, Default)]
pub struct Report {
    pub underlay: Option<String>,
    pub local_ip: Option<IpAddr>,
    pub subnet: Option<IpNetwork>,
    /// MTU of the VXLAN device (what pods should use in vxlan/auto mode).
    pub mtu: Option<u32>,
    pub device: DeviceChange,
    pub changes: Changes,
    /// Desired entries that were already right.
    pub unchanged: usize,
    /// Peers in the desired state (self and rejected entries excluded).
    pub peers: usize,
    pub problems: Vec<String>,
    pub error: Option<Error>,
    /// Wall time of each phase, for benchmarks and `vxlan sync -v`.
    pub timings: Vec<(&'static str, Duration)>,
}

impl Report {
    /// The pass ran (problems with single peers allowed).
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Nothing at all was changed in the kernel.
    pub fn is_noop(&self) -> bool {
        self.device == DeviceChange::Unchanged && self.changes.total() == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.error {
            return write!(f, "reconcile failed: {e}");
        }
        let c = &self.changes;
        write!(
            f,
            "reconciled {} peers (underlay {} {}, subnet {}, mtu {}): device {:?}; neigh +{} -{}; fdb +{} -{}; routes +{} -{}; {} unchanged; {} problems",
            self.peers,
            self.underlay.as_deref().unwrap_or("?"),
            self.local_ip.map(|i| i.to_string()).unwrap_or_default(),
            self.subnet.map(|s| s.to_string()).unwrap_or_default(),
            self.mtu.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            self.device,
            c.neighbours_set,
            c.neighbours_deleted,
            c.fdb_set,
            c.fdb_deleted,
            c.routes_set,
            c.routes_deleted,
            self.unchanged,
            self.problems.len()
        )
    }
}

/// Reconciles the overlay of the calling thread's netns to `cfg` + `peers`, holding the
/// config's lock file for the whole pass.
pub fn reconcile(cfg: &OverlayConfig, peers: &PeerSet) -> Report {
    let mut report = Report::default();
    let _guard = match crate::lock::lock(&cfg.lock_file) {
        Ok(g) => g,
        Err(e) => {
            report.error = Some(e);
            return report;
        }
    };
    let sockets = Socket::new().and_then(|s| Batcher::new().map(|b| (s, b)));
    match sockets {
        Ok((mut sock, mut batcher)) => {
            if let Err(e) = run(&mut sock, &mut batcher, cfg, peers, &mut report) {
                report.error = Some(e);
            }
        }
        Err(e) => report.error = Some(e.into()),
    }
    report
}

/// Like [`reconcile`] on sockets the caller opened (e.g. inside another netns), without the lock.
pub fn reconcile_with(
    sock: &mut Socket,
    batcher: &mut Batcher,
    cfg: &OverlayConfig,
    peers: &PeerSet,
) -> Report {
    let mut report = Report::default();
    if let Err(e) = run(sock, batcher, cfg, peers, &mut report) {
        report.error = Some(e);
    }
    report
}

/// The underlay as found in the kernel.
#[derive(Debug, Clone)]
pub struct Underlay {
    pub link: Link,
    pub local_ip: IpAddr,
    pub on_link: Vec<IpNetwork>,
}

/// Finds the underlay interface (configured name, else the one holding `localIP`, else the
/// default route's) and its address. `main_routes` is a dump of the main table of the
/// network's family.
pub fn resolve_underlay(
    sock: &mut Socket,
    cfg: &OverlayConfig,
    main_routes: &[Route],
) -> Result<Underlay, Error> {
    let link = if let Some(name) = &cfg.underlay_interface {
        sock.find_link(name)?
            .ok_or_else(|| UnderlayError::NoSuchInterface(name.clone()))?
    } else if let Some(ip) = cfg.local_ip {
        let holder = sock
            .addresses(None, Family::of(ip))?
            .into_iter()
            .find(|a| a.ip() == ip);
        let holder = holder.ok_or(UnderlayError::NoInterfaceWithIp(ip))?;
        sock.link_by_index(holder.index)?
    } else {
        let default = main_routes
            .iter()
            .filter(|r| r.dst.prefix() == 0 && r.oif.is_some())
            .min_by_key(|r| r.priority.unwrap_or(0))
            .and_then(|r| r.oif);
        let index = default.ok_or(UnderlayError::NoDefaultRoute)?;
        sock.link_by_index(index)?
    };
    let addrs = sock.addresses(Some(link.index), Family::Any)?;
    let global: Vec<_> = addrs
        .iter()
        .filter(|a| a.scope == AddressScope::Universe)
        .collect();
    let local_ip = match cfg.local_ip {
        Some(ip) => ip,
        None => global
            .iter()
            .filter(|a| !a.flags.contains(AddressFlags::Secondary))
            .map(|a| a.ip())
            .min_by_key(|ip| ip.is_ipv6())
            .ok_or_else(|| UnderlayError::NoGlobalAddress(link.name.clone()))?,
    };
    let on_link = global
        .iter()
        .filter_map(|a| IpNetwork::new(a.address.network(), a.address.prefix()).ok())
        .collect();
    Ok(Underlay {
        link,
        local_ip,
        on_link,
    })
}

/// The main table of the overlay network's family (the only routes a pass manages).
pub fn main_routes(sock: &mut Socket, cfg: &OverlayConfig) -> Result<Vec<Route>, Error> {
    Ok(sock.routes(cfg.family(), Some(TABLE_MAIN))?)
}

fn run(
    sock: &mut Socket,
    batcher: &mut Batcher,
    cfg: &OverlayConfig,
    peers: &PeerSet,
    report: &mut Report,
) -> Result<(), Error> {
    let mut clock = Instant::now();
    let mut lap = |report: &mut Report, what: &'static str| {
        let now = Instant::now();
        report.timings.push((what, now - clock));
        clock = now;
    };
    let mut routes = main_routes(sock, cfg)?;
    lap(report, "dump routes");
    let underlay = resolve_underlay(sock, cfg, &routes)?;
    report.underlay = Some(underlay.link.name.clone());
    report.local_ip = Some(underlay.local_ip);
    let (subnet, own_mac) =
        own_subnet(cfg, peers, underlay.local_ip).ok_or(Error::NotListed(underlay.local_ip))?;
    report.subnet = Some(subnet);
    let facts = NodeFacts {
        local_ip: underlay.local_ip,
        on_link: underlay.on_link.clone(),
    };
    let desired = desired_state(cfg, peers, &facts, subnet, own_mac);
    report.problems.extend(desired.problems.iter().cloned());
    report.peers = desired.peers.len();
    lap(report, "underlay + desired state");

    let device = if desired.device {
        let (link, change) = ensure_device(sock, cfg, &underlay, &desired)?;
        report.mtu = Some(link.mtu);
        if matches!(change, DeviceChange::Created | DeviceChange::Recreated(_)) {
            // Routes through a deleted device are gone: look again.
            routes = main_routes(sock, cfg)?;
        }
        report.device = change;
        Some(link.index)
    } else {
        if let Some(link) = sock.find_link(&cfg.device)? {
            // Only a VXLAN link of our name is ours to remove.
            if link.is_kind("vxlan") {
                sock.delete_link(link.index)?;
                report.device = DeviceChange::Deleted;
                routes = main_routes(sock, cfg)?;
            }
        }
        None
    };
    lap(report, "device");

    let observed = observe(sock, cfg.family(), device, routes)?;
    lap(report, "dump neighbours + fdb");
    let links = Links {
        device,
        underlay: underlay.link.index,
    };
    let plan = plan(&desired, &observed, links);
    report.unchanged = plan.unchanged;
    report.problems.extend(plan.problems.iter().cloned());
    lap(report, "plan");
    apply(batcher, device, plan, report)
}

/// Creates or fixes the device, its single VTEP /32 address and its up state.
fn ensure_device(
    sock: &mut Socket,
    cfg: &OverlayConfig,
    underlay: &Underlay,
    desired: &Desired,
) -> Result<(Link, DeviceChange), Error> {
    let overhead = if underlay.local_ip.is_ipv6() {
        OVERHEAD_V6
    } else {
        OVERHEAD_V4
    };
    let mtu = match cfg.mtu {
        Some(m) => m,
        None => underlay
            .link
            .mtu
            .checked_sub(overhead)
            .filter(|m| *m >= 68)
            .ok_or_else(|| UnderlayError::MtuTooSmall {
                ifname: underlay.link.name.clone(),
                mtu: underlay.link.mtu,
            })?,
    };
    let spec = VxlanSpec {
        name: cfg.device.clone(),
        vni: cfg.vni,
        port: cfg.port,
        local: Some(underlay.local_ip),
        underlay: Some(underlay.link.index),
        learning: false,
        mtu: Some(mtu),
        mac: Some(desired.vtep_mac),
        up: true,
    };
    let VxlanOutcome {
        link,
        created,
        recreated,
        mut adjusted,
    } = sock.ensure_vxlan(&spec)?;

    // Exactly one address of the network's family: the VTEP /32 or /128 (no broadcast or
    // prefix route needed; it is the source address for host → pod traffic across the
    // overlay). IPv6 link-local addresses are the kernel's and stay.
    let (family, host_len) = match desired.vtep {
        IpAddr::V4(_) => (Family::V4, 32),
        IpAddr::V6(_) => (Family::V6, 128),
    };
    let vtep = IpNetwork::new(desired.vtep, host_len).map_err(ConfigError::Vtep)?;
    let mut has_vtep = false;
    for a in sock.addresses(Some(link.index), family)? {
        if a.scope == AddressScope::Link {
            continue;
        }
        if a.address == vtep {
            has_vtep = true;
        } else {
            match sock.delete_address(link.index, a.address) {
                Ok(()) => adjusted.push(format!("removed address {}", a.address)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    if !has_vtep {
        // No DAD: nobody else can hold this address on the overlay, and a tentative address
        // cannot be the source of host → pod traffic for the first second.
        let opts = AddressOptions {
            nodad: true,
            ..AddressOptions::default()
        };
        match sock.add_address(link.index, vtep, &opts) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e.into()),
        }
        if !created && recreated.is_none() {
            adjusted.push(format!("added address {vtep}"));
        }
    }
    // Router advertisements have no business on a tunnel device (flannel does the same).
    let _ =
        netkit::sysctl::write_if_different(&format!("net/ipv6/conf/{}/accept_ra", cfg.device), "0");

    let change = match (created, recreated) {
        (true, _) => DeviceChange::Created,
        (_, Some(why)) => DeviceChange::Recreated(why),
        _ if !adjusted.is_empty() => DeviceChange::Adjusted(adjusted),
        _ => DeviceChange::Unchanged,
    };
    Ok((link, change))
}

/// One dump per object type: neighbours and FDB of our device, and the main table.
fn observe(
    sock: &mut Socket,
    family: Family,
    device: Option<u32>,
    routes: Vec<Route>,
) -> Result<Observed, Error> {
    let mut o = Observed {
        routes,
        ..Observed::default()
    };
    let Some(dev) = device else {
        return Ok(o);
    };
    let family = match family {
        Family::V6 => AddressFamily::Inet6,
        _ => AddressFamily::Inet,
    };
    for n in sock.neighbours(family, Some(dev))? {
        if let (true, Some(ip), false) = (n.is_permanent(), n.destination, n.lladdr.is_empty()) {
            o.neighbours.push((ip, n.lladdr));
        }
    }
    for n in sock.fdb_entries(Some(dev))? {
        if let (true, Some(mac)) = (n.flags.contains(NeighbourFlags::Own), n.mac()) {
            o.fdb.push((mac, n.destination));
        }
    }
    Ok(o)
}

fn request(op: &Op, device: Option<u32>) -> Result<Request, Error> {
    use netkit::netlink::{NLM_F_CREATE, NLM_F_REPLACE};
    let dev = || {
        device.ok_or_else(|| {
            Error::from(ConfigError::NeedsDevice {
                step: op.describe(),
            })
        })
    };
    let set = NLM_F_CREATE | NLM_F_REPLACE;
    Ok(match op {
        Op::DeleteRoute(r) => Request {
            message: RouteNetlinkMessage::DelRoute(r.to_message(true)?),
            flags: 0,
        },
        Op::SetRoute(r) => Request {
            message: RouteNetlinkMessage::NewRoute(r.to_message(false)?),
            flags: set,
        },
        Op::SetNeighbour { ip, mac } => Request {
            message: RouteNetlinkMessage::NewNeighbour(neigh::neighbour_message(dev()?, *ip, mac)),
            flags: set,
        },
        Op::DeleteNeighbour { ip } => Request {
            message: RouteNetlinkMessage::DelNeighbour(neigh::neighbour_message(dev()?, *ip, &[])),
            flags: 0,
        },
        Op::SetFdb { mac, dst } => Request {
            message: RouteNetlinkMessage::NewNeighbour(neigh::fdb_message(dev()?, mac, Some(*dst))),
            flags: set,
        },
        Op::DeleteFdb { mac, dst } => Request {
            message: RouteNetlinkMessage::DelNeighbour(neigh::fdb_message(dev()?, mac, *dst)),
            flags: 0,
        },
    })
}

/// Applies the plan group by group (route deletes, L2 changes, route sets); single failures
/// become problems and the rest goes on.
fn apply(
    batcher: &mut Batcher,
    device: Option<u32>,
    plan: Plan,
    report: &mut Report,
) -> Result<(), Error> {
    let groups = [
        ("apply route deletes", plan.route_deletes),
        ("apply neigh + fdb", plan.l2_changes),
        ("apply route sets", plan.route_sets),
    ];
    for (label, group) in groups {
        if group.is_empty() {
            continue;
        }
        let started = Instant::now();
        let mut ops = Vec::with_capacity(group.len());
        let mut requests = Vec::with_capacity(group.len());
        for op in group {
            match request(&op, device) {
                Ok(r) => {
                    requests.push(r);
                    ops.push(op);
                }
                Err(e) => report.problems.push(format!("{}: {e}", op.describe())),
            }
        }
        let results = batcher.run(requests)?;
        for (op, result) in ops.iter().zip(results) {
            let is_delete = matches!(
                op,
                Op::DeleteRoute(_) | Op::DeleteNeighbour { .. } | Op::DeleteFdb { .. }
            );
            match result {
                Ok(()) => count(&mut report.changes, op),
                Err(e) if is_delete && e.is_not_found() => {}
                Err(e) => report
                    .problems
                    .push(format!("failed to {}: {e}", op.describe())),
            }
        }
        report.timings.push((label, started.elapsed()));
    }
    Ok(())
}

fn count(c: &mut Changes, op: &Op) {
    match op {
        Op::DeleteRoute(_) => c.routes_deleted += 1,
        Op::SetRoute(_) => c.routes_set += 1,
        Op::SetNeighbour { .. } => c.neighbours_set += 1,
        Op::DeleteNeighbour { .. } => c.neighbours_deleted += 1,
        Op::SetFdb { .. } => c.fdb_set += 1,
        Op::DeleteFdb { .. } => c.fdb_deleted += 1,
    }
}
