//! The routed backends (`wireguard`, `ipip`): the agent's seam to them, and their kernel
//! side. Unlike vxlan (whose reconcile is the `vxlan` crate's, shared with the CNI plugin),
//! these are programmed here directly over netlink: each pass reads what the kernel has
//! (devices, peers, addresses, routes) and changes only what differs from the leases, so a
//! pass without membership changes is a handful of reads.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnetwork::{IpNetwork, Ipv4Network};
use netkit::link_kinds::NewLinkBase;
use netkit::packet_route::address::AddressScope;
use netkit::packet_route::route::RouteScope;
use netkit::{AddressOptions, Family, Route};

use crate::error::AgentError;
use crate::ipip;
use crate::key::SubnetKey;
use crate::lease::LeaseAttrs;
use crate::log;
use crate::netconfig::{BackendKind, NetConfig};
use crate::store::StoredLease;
use crate::wgkey::{self, KeyPair};
use crate::wireguard::{self, DevicePlan, Mode, WireguardOptions};

/// Bound on one pass (a healthy one takes milliseconds).
const PASS_TIMEOUT: Duration = Duration::from_secs(60);

enum Kind {
    Wireguard {
        opts: WireguardOptions,
        keys: KeyPair,
    },
    Ipip {
        direct_routing: bool,
    },
}

/// A routed backend, set up for this node.
pub struct Tunnel {
    kind: Kind,
    iface: Option<String>,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    /// The last pass's outcome, so unchanged passes stay out of the log.
    last_report: Option<String>,
    /// Peers the last successful pass programmed (for the metrics).
    programmed: usize,
}

impl Tunnel {
    /// The routed backend of `net`, or `None` for vxlan. A wireguard node's key is loaded
    /// (or created) here, before the lease that publishes it.
    pub fn new(
        net: &NetConfig,
        iface: Option<String>,
        public_ip: Ipv4Addr,
        public_ipv6: Option<Ipv6Addr>,
    ) -> Result<Option<Tunnel>, AgentError> {
        let kind = match &net.backend.kind {
            BackendKind::Vxlan => return Ok(None),
            BackendKind::Ipip => Kind::Ipip {
                direct_routing: net.backend.direct_routing,
            },
            BackendKind::Wireguard(opts) => {
                if opts.mode == Mode::Ipv6 && net.ipv6.is_none() {
                    return Err(AgentError::BadConfig {
                        key: "Backend.Mode".into(),
                        msg: "wireguard Mode \"ipv6\" needs a dual-stack network (EnableIPv6)"
                            .into(),
                    });
                }
                let path = wgkey::key_file_path();
                let (keys, created) = wgkey::load_or_create(&path)?;
                log!(
                    "wireguard public key {} ({} {})",
                    wgkey::encode(&keys.public),
                    if created { "new, saved in" } else { "from" },
                    path.display()
                );
                Kind::Wireguard {
                    opts: opts.clone(),
                    keys,
                }
            }
        };
        Ok(Some(Tunnel {
            kind,
            iface,
            public_ip,
            public_ipv6,
            last_report: None,
            programmed: 0,
        }))
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Wireguard { opts, .. } => format!(
                "wireguard port {}{}, mode {:?}{}{}",
                opts.listen_port,
                match (opts.mode, self.public_ipv6) {
                    (Mode::Separate, Some(_)) => format!(" (IPv6 {})", opts.listen_port_v6),
                    _ => String::new(),
                },
                opts.mode,
                if opts.psk.is_some() { ", PSK" } else { "" },
                if opts.keepalive > 0 {
                    format!(", keepalive {}s", opts.keepalive)
                } else {
                    String::new()
                }
            ),
            Kind::Ipip { direct_routing } => format!(
                "ipip{}",
                if *direct_routing {
                    ", DirectRouting"
                } else {
                    ""
                }
            ),
        }
    }

    /// This node's lease value.
    pub fn lease_attrs(&self) -> LeaseAttrs {
        match &self.kind {
            Kind::Wireguard { opts, keys } => {
                wireguard::lease_attrs(opts, keys, self.public_ip, self.public_ipv6)
            }
            Kind::Ipip { .. } => ipip::lease_attrs(self.public_ip),
        }
    }

    /// One pass for the leases known; returns the MTU pods get (the smallest device's).
    pub async fn reconcile(
        &mut self,
        net: &NetConfig,
        own: &SubnetKey,
        leases: &BTreeMap<SubnetKey, StoredLease>,
    ) -> Result<u32, AgentError> {
        let iface = self.iface.clone();
        let public_ip = self.public_ip;
        let peers_planned;
        let pass: Box<dyn FnOnce() -> Result<(u32, String), String> + Send> = match &self.kind {
            Kind::Wireguard { opts, keys } => {
                let plans = wireguard::plan(net, opts, own, self.public_ipv6, leases);
                peers_planned = plans.iter().map(|d| d.peers.len()).sum();
                let private = keys.private;
                Box::new(move || {
                    let underlay = Underlay::find(iface.as_deref(), public_ip)?;
                    apply_wireguard(&plans, &private, &underlay)
                })
            }
            Kind::Ipip { direct_routing } => {
                let direct_routing = *direct_routing;
                let own = *own;
                let network = net.network;
                let peers = ipip::peers(&own, leases);
                peers_planned = peers.len();
                Box::new(move || {
                    let underlay = Underlay::find(iface.as_deref(), public_ip)?;
                    let routes = ipip::plan(&peers, direct_routing, &underlay.networks);
                    apply_ipip(network, own.v4, public_ip, &routes, &underlay)
                })
            }
        };
        let result = tokio::time::timeout(PASS_TIMEOUT, tokio::task::spawn_blocking(pass)).await;
        let (mtu, report) = match result {
            Ok(Ok(Ok(done))) => done,
            Ok(Ok(Err(e))) => return Err(AgentError::Reconcile(e)),
            Ok(Err(join)) => {
                return Err(AgentError::Reconcile(format!(
                    "reconcile thread failed: {join}"
                )))
            }
            Err(_) => {
                return Err(AgentError::Reconcile(format!(
                    "reconcile did not finish within {PASS_TIMEOUT:?}"
                )))
            }
        };
        if self.last_report.as_deref() != Some(&report) {
            log!("{report}");
            self.last_report = Some(report);
        }
        self.programmed = peers_planned;
        Ok(mtu)
    }

    /// Peers the last successful pass programmed.
    pub fn programmed(&self) -> usize {
        self.programmed
    }
}

/// The node's underlay interface: flannel's external interface (`--iface`, else the one
/// holding the public address).
struct Underlay {
    index: u32,
    name: String,
    mtu: u32,
    networks: Vec<Ipv4Network>,
}

impl Underlay {
    fn find(iface: Option<&str>, public_ip: Ipv4Addr) -> Result<Underlay, String> {
        let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
        let addrs = sock
            .addresses(None, Family::V4)
            .map_err(|e| e.to_string())?;
        let link = match iface {
            Some(name) => sock.link_by_name(name).map_err(|e| e.to_string())?,
            None => {
                let index = addrs
                    .iter()
                    .find(|a| a.ip() == IpAddr::V4(public_ip))
                    .map(|a| a.index)
                    .ok_or_else(|| {
                        format!("no interface has the public address {public_ip}; give --iface")
                    })?;
                sock.link_by_index(index).map_err(|e| e.to_string())?
            }
        };
        let networks = addrs
            .iter()
            .filter(|a| a.index == link.index)
            .filter_map(|a| match a.address {
                IpNetwork::V4(n) => Ipv4Network::new(n.network(), n.prefix()).ok(),
                IpNetwork::V6(_) => None,
            })
            .collect();
        Ok(Underlay {
            index: link.index,
            name: link.name,
            mtu: link.mtu,
            networks,
        })
    }

    /// The device MTU for a backend adding `overhead` bytes.
    fn mtu_less(&self, overhead: u32) -> Result<u32, String> {
        match self.mtu.checked_sub(overhead) {
            Some(m) if m >= 576 => Ok(m),
            _ => Err(format!(
                "MTU {} of {} is too small for a tunnel adding {overhead} bytes",
                self.mtu, self.name
            )),
        }
    }
}

/// Keeps exactly `want` (the node's own addresses) among the global addresses of `index`.
fn ensure_addresses(
    sock: &mut netkit::Socket,
    index: u32,
    want: &[IpNetwork],
) -> Result<(), String> {
    let have = sock
        .addresses(Some(index), Family::Any)
        .map_err(|e| e.to_string())?;
    for a in &have {
        if a.scope == AddressScope::Universe && !want.contains(&a.address) {
            sock.delete_address(index, a.address)
                .map_err(|e| e.to_string())?;
        }
    }
    for w in want {
        if !have.iter().any(|a| a.address == *w) {
            let opts = AddressOptions {
                nodad: w.is_ipv6(),
                ..Default::default()
            };
            sock.add_address(index, *w, &opts)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The wireguard devices of `plans`, created or corrected, then their peers synced.
fn apply_wireguard(
    plans: &[DevicePlan],
    private: &wgkey::Key,
    underlay: &Underlay,
) -> Result<(u32, String), String> {
    let mtu = underlay.mtu_less(wireguard::OVERHEAD)?;
    let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
    let mut wg = netkit::wireguard::WgSocket::new().map_err(|e| {
        if e.errno() == Some(libc::ENOENT) {
            "this kernel has no wireguard module (CONFIG_WIREGUARD)".to_string()
        } else {
            e.to_string()
        }
    })?;
    let mut reports = Vec::new();
    for plan in plans {
        let link = match sock.find_link(plan.name).map_err(|e| e.to_string())? {
            Some(l) if !l.is_kind("wireguard") => {
                return Err(format!(
                    "{} exists but is not a wireguard device; remove it",
                    plan.name
                ))
            }
            Some(l) => l,
            None => {
                let base = NewLinkBase {
                    name: plan.name,
                    mtu: Some(mtu),
                    ..Default::default()
                };
                sock.create_link(netkit::link_kinds::wireguard_message(&base))
                    .map_err(|e| e.to_string())?;
                sock.link_by_name(plan.name).map_err(|e| e.to_string())?
            }
        };
        if link.mtu != mtu {
            sock.set_link_mtu(link.index, mtu)
                .map_err(|e| e.to_string())?;
        }
        let report = wg
            .sync_device(plan.name, private, plan.listen_port, &plan.peers)
            .map_err(|e| e.to_string())?;
        ensure_addresses(&mut sock, link.index, &plan.addresses)?;
        if !link.is_up() {
            sock.set_link_up(link.index).map_err(|e| e.to_string())?;
        }
        for net in &plan.routes {
            let mut route = Route::new(*net).dev(link.index);
            route.scope = Some(RouteScope::Link);
            sock.replace_route(&route).map_err(|e| e.to_string())?;
        }
        reports.push(format!(
            "{}: {} peer(s) ({report})",
            plan.name,
            plan.peers.len()
        ));
    }
    Ok((mtu, format!("wireguard reconciled: {}", reports.join("; "))))
}

/// `flannel.ipip` created or corrected, then its peer routes synced.
fn apply_ipip(
    network: Ipv4Network,
    own: Ipv4Network,
    local: Ipv4Addr,
    routes: &[ipip::PeerRoute],
    underlay: &Underlay,
) -> Result<(u32, String), String> {
    let want_mtu = underlay.mtu_less(ipip::OVERHEAD)?;
    let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
    let create = |sock: &mut netkit::Socket| -> Result<netkit::Link, String> {
        let base = NewLinkBase {
            name: ipip::DEVICE,
            mtu: Some(want_mtu),
            ..Default::default()
        };
        sock.create_link(netkit::link_kinds::ipip_message(&base, local))
            .map_err(|e| {
                if e.errno() == Some(libc::EOPNOTSUPP) {
                    "this kernel has no ipip module (CONFIG_NET_IPIP)".to_string()
                } else {
                    e.to_string()
                }
            })?;
        sock.link_by_name(ipip::DEVICE).map_err(|e| e.to_string())
    };
    let link = match sock.find_link(ipip::DEVICE).map_err(|e| e.to_string())? {
        None => create(&mut sock)?,
        Some(l) => match netkit::link_kinds::ipip_endpoints(&l) {
            None => {
                return Err(format!(
                    "{} exists but is not an ipip device; remove it",
                    ipip::DEVICE
                ))
            }
            // Another local address (the node's address changed) or a fixed remote: made
            // again, as flanneld does.
            Some((l_ip, remote)) if l_ip != Some(IpAddr::V4(local)) || remote => {
                log!(
                    "{} has local {l_ip:?}{}; recreating it",
                    ipip::DEVICE,
                    if remote { " and a fixed remote" } else { "" }
                );
                sock.delete_link(l.index).map_err(|e| e.to_string())?;
                create(&mut sock)?
            }
            Some(_) => l,
        },
    };
    // As flannel: only ever lowered (an operator may have set a smaller one).
    let mtu = if link.mtu == 0 || link.mtu > want_mtu {
        sock.set_link_mtu(link.index, want_mtu)
            .map_err(|e| e.to_string())?;
        want_mtu
    } else {
        link.mtu
    };
    let own_addr = IpNetwork::new(own.network().into(), 32).map_err(|e| e.to_string())?;
    ensure_addresses(&mut sock, link.index, &[own_addr])?;
    if !link.is_up() {
        sock.set_link_up(link.index).map_err(|e| e.to_string())?;
    }
    let want: Vec<Route> = routes
        .iter()
        .map(|r| ipip::kernel_route(r, link.index, underlay.index))
        .collect();
    let key = |r: &Route| (r.dst_network(), r.gateway, r.oif);
    // Ours: every route through the tunnel, and gateway routes into the cluster network on
    // the underlay (DirectRouting ones), never the node's own subnet.
    let have: Vec<Route> = sock
        .routes(Family::V4, Some(netkit::route::TABLE_MAIN))
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| {
            r.oif == Some(link.index)
                || (r.oif == Some(underlay.index)
                    && r.gateway.is_some()
                    && r.dst.prefix() > network.prefix()
                    && network.contains(match r.dst.network() {
                        IpAddr::V4(v4) => v4,
                        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
                    })
                    && r.dst_network() != IpNetwork::V4(own))
        })
        .collect();
    let (mut added, mut removed) = (0, 0);
    for r in &have {
        if !want.iter().any(|w| key(w) == key(r)) {
            sock.delete_route(r).map_err(|e| e.to_string())?;
            removed += 1;
        }
    }
    for w in &want {
        if !have.iter().any(|r| key(r) == key(w)) {
            sock.replace_route(w).map_err(|e| e.to_string())?;
            added += 1;
        }
    }
    Ok((
        mtu,
        format!(
            "ipip reconciled: {} peer route(s) ({added} added, {removed} removed), {} MTU {mtu}",
            want.len(),
            ipip::DEVICE
        ),
    ))
}
