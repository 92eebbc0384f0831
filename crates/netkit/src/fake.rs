//! A recording, in-memory kernel for unit tests without root (feature `fake`).
//!
//! [`FakeKernel`] implements [`Kernel`] and its sockets [`Netlink`] over a model of network
//! namespaces (keyed by path; the calling thread's is [`HOST`]), each with links, addresses,
//! routes and sysctls. It keeps the kernel's rules that plugin logic depends on: names are
//! unique per namespace (EEXIST), a missing link is ENODEV, a link's addresses, routes and
//! sysctls go with it, a route needs its device up and its gateway on a connected prefix,
//! an address gives its link a connected route while the link is up.
//!
//! Every operation is recorded, in order, as a short `ip`-like line (`/pod: link set net1 up`)
//! before it takes effect, and one can be made to fail: the N-th ([`FakeKernel::fail_at`]) or
//! the first matching a predicate ([`FakeKernel::fail_when`]), with EIO or a chosen errno.
//! [`FakeKernel::state`] is a comparable snapshot of the model, to assert that a failed ADD
//! left nothing behind. Other fakes (IPAM) can share the log and the injection through
//! [`FakeKernel::record`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use ipnetwork::IpNetwork;
use netlink_packet_core::Nla;
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, Inet6DevConf, InfoBridge, InfoData, InfoKind, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, State as OperState,
};
use netlink_packet_route::route::{RouteProtocol, RouteScope};

use crate::addr::{address_message, Address, AddressOptions, Family};
use crate::bridge_port::PortFlags;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Netlink};
use crate::link::{format_mac, validate_ifname, BridgeOptions, Link, VethSpec};
use crate::route::{Route, TABLE_MAIN};
use crate::sysfs::MacOrigin;
use crate::tap::TapSpec;

/// The key of the calling thread's namespace (what [`Kernel::socket`] opens).
pub const HOST: &str = "host";

/// `IFLA_INFO_KIND` as a raw attribute (how netkit's request builders send it).
const IFLA_INFO_KIND: u16 = 1;

/// One link of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLink {
    pub index: u32,
    pub name: String,
    pub kind: Option<String>,
    /// `IFLA_INFO_DATA` as created (macvlan mode, VLAN ID...).
    pub data: Option<InfoData>,
    pub mtu: u32,
    pub mac: [u8; 6],
    pub up: bool,
    pub master: Option<u32>,
    /// `IFLA_LINK`: the parent's ifindex (in the namespace that created the link).
    pub parent: Option<u32>,
    /// `IFLA_IFALIAS`, when set (it goes with the link to another namespace).
    pub alias: Option<String>,
}

/// One namespace of the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FakeNamespace {
    pub links: BTreeMap<u32, FakeLink>,
    /// `(ifindex, address)`, in the order they were added.
    pub addresses: Vec<(u32, IpNetwork)>,
    /// Routes added explicitly (connected routes are derived from addresses).
    pub routes: Vec<Route>,
    /// Sysctls written, by key (`net/ipv4/conf/eth0/arp_notify`); unwritten ones read "0".
    pub sysctls: BTreeMap<String, String>,
    /// Connected routes deleted explicitly (`ip route del <prefix> dev X`), by link and
    /// prefix: the address stays, its route does not.
    pub withdrawn: Vec<(u32, IpNetwork)>,

    // bridge
    /// Bridge port state, by the port's ifindex (made when a link joins a bridge).
    pub ports: BTreeMap<u32, FakePort>,
    /// Links in promiscuous mode.
    pub promisc: BTreeSet<u32>,
    /// Links whose MAC was set explicitly: a bridge among them keeps its MAC whatever its
    /// ports (the kernel's `NET_ADDR_SET`).
    pub mac_set: BTreeSet<u32>,
}

impl FakeNamespace {
    fn by_name(&self, name: &str) -> Option<&FakeLink> {
        self.links.values().find(|l| l.name == name)
    }

    fn name_of(&self, index: u32) -> String {
        self.links
            .get(&index)
            .map(|l| l.name.clone())
            .unwrap_or_else(|| format!("#{index}"))
    }

    /// Drops what belongs to link `index` (addresses, routes through it, its sysctls).
    fn forget_link(&mut self, index: u32) {
        self.leave_bridge(index);
        let name = self.name_of(index);
        self.addresses.retain(|(i, _)| *i != index);
        self.routes.retain(|r| r.oif != Some(index));
        self.withdrawn.retain(|(i, _)| *i != index);
        self.sysctls
            .retain(|k, _| conf_ifname(k) != Some(name.as_str()));
        for l in self.links.values_mut() {
            if l.master == Some(index) {
                l.master = None;
            }
        }
    }

    /// The connected routes of the addresses on up links, then the explicit routes.
    fn all_routes(&self) -> Vec<Route> {
        let mut out = Vec::new();
        for (index, addr) in &self.addresses {
            let prefix = IpNetwork::new(addr.network(), addr.prefix()).unwrap_or(*addr);
            if self.links.get(index).is_some_and(|l| l.up)
                && !self.withdrawn.contains(&(*index, prefix))
            {
                let mut r = Route::new(prefix).dev(*index);
                r.table = Some(TABLE_MAIN);
                r.protocol = Some(RouteProtocol::Kernel);
                r.scope = Some(RouteScope::Link);
                r.src = Some(addr.ip());
                out.push(r);
            }
        }
        out.extend(self.routes.iter().cloned());
        out
    }

    /// Whether `gw` is on link through an up link (`oif`'s, when given): a main-table route
    /// without a gateway covers it (a connected prefix, or a device route such as ptp's
    /// `gw/32 dev X scope link`).
    fn reachable(&self, gw: IpAddr, oif: Option<u32>) -> bool {
        self.all_routes().iter().any(|r| {
            r.gateway.is_none()
                && r.table_id() == TABLE_MAIN
                && r.dst_network().contains(gw)
                && r.oif.is_some_and(|i| {
                    oif.is_none_or(|o| o == i) && self.links.get(&i).is_some_and(|l| l.up)
                })
        })
    }
}

/// The interface a `net/ipv{4,6}/conf/<if>/<leaf>` key names.
fn conf_ifname(key: &str) -> Option<&str> {
    let rest = key
        .strip_prefix("net/ipv4/conf/")
        .or_else(|| key.strip_prefix("net/ipv6/conf/"))?;
    rest.split('/').next()
}

/// A comparable snapshot of the model: every namespace by key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FakeState {
    pub namespaces: BTreeMap<String, FakeNamespace>,
}

type Predicate = Box<dyn Fn(&str) -> bool + Send>;

/// A failure to inject.
enum Injection {
    /// The operation with this number (0 = the first recorded after the last reset).
    At(usize, i32),
    /// The first operation whose line matches.
    When(Predicate, i32),
}

#[derive(Default)]
struct Model {
    state: FakeState,
    log: Vec<String>,
    next_index: u32,
    injections: Vec<Injection>,
    /// Models a kernel before 6.3, which does not echo a new link to its creator.
    no_new_link_echo: bool,
}

/// The fake kernel; clones share one model.
#[derive(Clone)]
pub struct FakeKernel {
    model: Arc<Mutex<Model>>,
}

impl Default for FakeKernel {
    fn default() -> Self {
        Self::new()
    }
}

/// An open namespace of the fake: its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNs(pub String);

/// A socket of the fake, bound to one namespace.
pub struct FakeSocket {
    kernel: FakeKernel,
    ns: String,
}

impl FakeKernel {
    /// A kernel with only the host namespace, which has `lo` (index 1, up).
    pub fn new() -> FakeKernel {
        let k = FakeKernel {
            model: Arc::new(Mutex::new(Model {
                next_index: 2,
                ..Default::default()
            })),
        };
        k.add_netns(HOST);
        k
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // A test that panicked while holding the lock leaves a model worth reading anyway.
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates the namespace `path` with its `lo` (setup: not recorded).
    pub fn add_netns(&self, path: &str) {
        let lo = FakeLink {
            index: 1,
            name: "lo".into(),
            kind: None,
            data: None,
            mtu: 65536,
            mac: [0; 6],
            up: true,
            master: None,
            parent: None,
            alias: None,
        };
        let mut ns = FakeNamespace::default();
        ns.links.insert(1, lo);
        self.lock().state.namespaces.insert(path.to_string(), ns);
    }

    /// Removes the namespace `path` and everything in it (setup: not recorded).
    pub fn remove_netns(&self, path: &str) {
        destroy_netns(&mut self.lock(), path);
    }

    /// Adds an up link `name` of `kind` (`None`: a physical NIC) to namespace `ns` (setup:
    /// not recorded); its ifindex. A bridge made so has its MAC set (as one configured by the
    /// administrator or pinned by an earlier ADD): ports joining it leave its MAC alone. A
    /// bridge created through [`Netlink::ensure_bridge`] without a MAC takes its ports'.
    pub fn setup_link(&self, ns: &str, name: &str, kind: Option<&str>, mtu: u32) -> u32 {
        let mut m = self.lock();
        let index = m.next_index;
        m.next_index += 1;
        let link = FakeLink {
            index,
            name: name.into(),
            kind: kind.map(str::to_string),
            data: None,
            mtu,
            mac: mac_for(index),
            up: true,
            master: None,
            parent: None,
            alias: None,
        };
        if let Some(n) = m.state.namespaces.get_mut(ns) {
            n.links.insert(index, link);
            if kind == Some("bridge") {
                n.mac_set.insert(index);
            }
        }
        index
    }

    /// Adds an address to link `index` of `ns` (setup: not recorded).
    pub fn setup_address(&self, ns: &str, index: u32, address: IpNetwork) {
        if let Some(n) = self.lock().state.namespaces.get_mut(ns) {
            n.addresses.push((index, address));
        }
    }

    /// Adds a route to `ns` as given (setup: not recorded, not checked).
    pub fn setup_route(&self, ns: &str, route: Route) {
        if let Some(n) = self.lock().state.namespaces.get_mut(ns) {
            n.routes.push(normalized(route));
        }
    }

    /// Writes a sysctl of `ns` (setup: not recorded).
    pub fn setup_sysctl(&self, ns: &str, key: &str, value: &str) {
        if let Some(n) = self.lock().state.namespaces.get_mut(ns) {
            n.sysctls.insert(key.into(), value.into());
        }
    }

    /// A snapshot of the model.
    pub fn state(&self) -> FakeState {
        self.lock().state.clone()
    }

    /// A snapshot of one namespace (empty when it does not exist).
    pub fn namespace(&self, ns: &str) -> FakeNamespace {
        self.lock()
            .state
            .namespaces
            .get(ns)
            .cloned()
            .unwrap_or_default()
    }

    /// The link `name` of namespace `ns`, if any.
    pub fn link(&self, ns: &str, name: &str) -> Option<FakeLink> {
        self.namespace(ns).by_name(name).cloned()
    }

    /// Every operation recorded since the last reset, in order (failed ones included).
    pub fn ops(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Forgets the recorded operations and the pending injections (after setup).
    pub fn reset(&self) {
        let mut m = self.lock();
        m.log.clear();
        m.injections.clear();
    }

    /// From now on the kernel does not describe the veth pairs it creates (as before Linux
    /// 6.3): [`Netlink::create_veth_described`] answers `None`.
    pub fn without_new_link_echo(&self) {
        self.lock().no_new_link_echo = true;
    }

    /// Makes operation number `n` (0-based, counted from the last reset) fail with EIO.
    pub fn fail_at(&self, n: usize) {
        self.fail_at_with(n, libc::EIO);
    }

    /// Makes operation number `n` fail with `errno`.
    pub fn fail_at_with(&self, n: usize, errno: i32) {
        self.lock().injections.push(Injection::At(n, errno));
    }

    /// Makes the first operation whose recorded line matches `pred` fail with EIO.
    pub fn fail_when(&self, pred: impl Fn(&str) -> bool + Send + 'static) {
        self.fail_when_with(libc::EIO, pred);
    }

    /// Makes the first operation whose recorded line matches `pred` fail with `errno`.
    pub fn fail_when_with(&self, errno: i32, pred: impl Fn(&str) -> bool + Send + 'static) {
        self.lock()
            .injections
            .push(Injection::When(Box::new(pred), errno));
    }

    /// Records `op` and tells whether it must fail (an injected failure, used up by this
    /// operation): the hook other fakes use to share this log.
    pub fn record(&self, op: impl Into<String>) -> Result<()> {
        let op = op.into();
        let mut m = self.lock();
        let n = m.log.len();
        let hit = m.injections.iter().position(|i| match i {
            Injection::At(at, _) => *at == n,
            Injection::When(pred, _) => pred(&op),
        });
        let errno = hit.map(|at| match m.injections.remove(at) {
            Injection::At(_, e) | Injection::When(_, e) => e,
        });
        match errno {
            Some(errno) => {
                m.log.push(format!("{op} (injected failure)"));
                Err(Error::kernel(format!("{op} (injected)"), errno))
            }
            None => {
                m.log.push(op);
                Ok(())
            }
        }
    }

    /// Records `op` in namespace `ns`, then runs `f` on that namespace.
    fn op<T>(
        &self,
        ns: &str,
        op: String,
        f: impl FnOnce(&mut Model, &str) -> Result<T>,
    ) -> Result<T> {
        self.record(format!("{ns}: {op}"))?;
        let mut m = self.lock();
        if !m.state.namespaces.contains_key(ns) {
            return Err(gone(ns));
        }
        f(&mut m, ns)
    }
}

/// A namespace that disappeared under an open socket.
fn gone(ns: &str) -> Error {
    Error::NetnsNotFound {
        context: String::new(),
        path: ns.to_string(),
    }
}

/// A locally administered MAC derived from the ifindex (stable across runs).
fn mac_for(index: u32) -> [u8; 6] {
    let b = index.to_be_bytes();
    [0x02, 0xfa, b[0], b[1], b[2], b[3]]
}

fn normalized(mut r: Route) -> Route {
    r.table = Some(r.table_id());
    r.dst = r.dst_network();
    r
}

fn no_device(ctx: String) -> Error {
    Error::kernel(ctx, libc::ENODEV)
}

fn ns_mut<'a>(m: &'a mut Model, ns: &str) -> &'a mut FakeNamespace {
    m.state.namespaces.entry(ns.to_string()).or_default()
}

// ptp, ipvlan, host-device

/// Deletes the connected route `wanted` (a prefix of an address on its device); whether
/// there was one.
fn withdraw_connected(n: &mut FakeNamespace, wanted: &Route) -> bool {
    let found = n.all_routes().into_iter().find(|r| {
        r.protocol == Some(RouteProtocol::Kernel)
            && r.dst == wanted.dst
            && r.table == wanted.table
            && wanted.gateway.is_none()
            && (wanted.oif.is_none() || r.oif == wanted.oif)
    });
    match found.and_then(|r| r.oif.map(|oif| (oif, r.dst))) {
        Some(key) => {
            n.withdrawn.push(key);
            true
        }
        None => false,
    }
}

/// What the kernel does with a namespace that goes away: its veths die with their peers; its
/// physical devices (links without a kind, but `lo`) return to the host down and without
/// addresses, under their name or, when that is taken there, `dev<ifindex>`.
fn destroy_netns(m: &mut Model, path: &str) {
    let Some(gone) = m.state.namespaces.remove(path) else {
        return;
    };
    for l in gone.links.values() {
        if l.kind.as_deref() == Some("veth") {
            remove_veth_peer(m, Some(l));
        } else if l.kind.is_none() && l.index != 1 && path != HOST {
            let mut back = l.clone();
            back.up = false;
            back.master = None;
            let host = ns_mut(m, HOST);
            if host.by_name(&back.name).is_some() {
                back.name = format!("dev{}", back.index);
            }
            host.links.insert(back.index, back);
        }
    }
}

fn ns_ref<'a>(m: &'a Model, ns: &str) -> &'a FakeNamespace {
    static EMPTY: std::sync::OnceLock<FakeNamespace> = std::sync::OnceLock::new();
    m.state
        .namespaces
        .get(ns)
        .unwrap_or_else(|| EMPTY.get_or_init(FakeNamespace::default))
}

/// The link as the kernel would report it, with its IPv6 `accept_ra` in the per-family
/// configuration as a kernel with IPv6 reports it.
fn to_link(l: &FakeLink, accept_ra: i32) -> Link {
    let mut msg = LinkMessage::default();
    msg.header.index = l.index;
    if l.up {
        msg.header.flags = LinkFlags::Up | LinkFlags::Running | LinkFlags::LowerUp;
    }
    let attrs = &mut msg.attributes;
    attrs.push(LinkAttribute::IfName(l.name.clone()));
    attrs.push(LinkAttribute::Mtu(l.mtu));
    attrs.push(LinkAttribute::Address(l.mac.to_vec()));
    attrs.push(LinkAttribute::OperState(if l.up {
        OperState::Up
    } else {
        OperState::Down
    }));
    if let Some(m) = l.master {
        attrs.push(LinkAttribute::Controller(m));
    }
    if let Some(p) = l.parent {
        attrs.push(LinkAttribute::Link(p));
    }
    if let Some(a) = &l.alias {
        attrs.push(LinkAttribute::IfAlias(a.clone()));
    }
    if let Some(kind) = &l.kind {
        let mut info = vec![LinkInfo::Kind(InfoKind::from(kind.as_str()))];
        info.extend(l.data.clone().map(LinkInfo::Data));
        attrs.push(LinkAttribute::LinkInfo(info));
    }
    let mut conf = Inet6DevConf::default();
    conf.accept_ra = accept_ra;
    attrs.push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
        vec![AfSpecInet6::DevConf(conf)],
    )]));
    Link::as_reported(&msg)
}

/// What an RTM_NEWLINK asks for.
struct NewLink {
    name: String,
    kind: Option<String>,
    data: Option<InfoData>,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    parent: Option<u32>,
}

fn decode_new_link(msg: &LinkMessage) -> NewLink {
    let mut n = NewLink {
        name: String::new(),
        kind: None,
        data: None,
        mtu: None,
        mac: None,
        parent: None,
    };
    for a in &msg.attributes {
        match a {
            LinkAttribute::IfName(s) => n.name = s.clone(),
            LinkAttribute::Mtu(v) => n.mtu = Some(*v),
            LinkAttribute::Address(m) => n.mac = <[u8; 6]>::try_from(m.as_slice()).ok(),
            LinkAttribute::Link(p) => n.parent = Some(*p),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        LinkInfo::Kind(k) => n.kind = Some(k.to_string()),
                        LinkInfo::Other(nla) if nla.kind() == IFLA_INFO_KIND => {
                            let mut raw = vec![0u8; nla.value_len()];
                            nla.emit_value(&mut raw);
                            let text = String::from_utf8_lossy(&raw);
                            n.kind = Some(text.trim_end_matches('\0').to_string());
                        }
                        LinkInfo::Data(d) => n.data = Some(d.clone()),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    n
}

fn describe_new_link(n: &NewLink, netns: Option<&FakeNs>) -> String {
    let mut s = format!("link add {}", n.name);
    if let Some(p) = n.parent {
        s.push_str(&format!(" link #{p}"));
    }
    if let Some(m) = n.mac {
        s.push_str(&format!(" address {}", format_mac(&m)));
    }
    if let Some(v) = n.mtu {
        s.push_str(&format!(" mtu {v}"));
    }
    if let Some(ns) = netns {
        s.push_str(&format!(" netns {}", ns.0));
    }
    s.push_str(&format!(" type {}", n.kind.as_deref().unwrap_or("?")));
    s
}

impl FakeSocket {
    fn op<T>(&self, op: String, f: impl FnOnce(&mut Model, &str) -> Result<T>) -> Result<T> {
        self.kernel.op(&self.ns, op, f)
    }

    fn name_of(&self, index: u32) -> String {
        ns_ref(&self.kernel.lock(), &self.ns).name_of(index)
    }

    /// A route as `ip route` shows it, the device by name.
    /// `route add` (`beside`: `route prepend`, which refuses only an identical route and
    /// puts the new one first).
    fn insert_route(&mut self, route: &Route, beside: bool) -> Result<()> {
        let route = normalized(route.clone());
        let text = self.route_text(&route);
        let verb = if beside { "prepend" } else { "add" };
        self.op(format!("route {verb} {text}"), |m, ns| {
            let ctx = format!("failed to add route {route}");
            let n = ns_mut(m, ns);
            if let Some(oif) = route.oif {
                match n.links.get(&oif) {
                    None => return Err(no_device(ctx)),
                    Some(l) if !l.up => return Err(Error::kernel(ctx, libc::ENETDOWN)),
                    Some(_) => {}
                }
            }
            if let Some(gw) = route.gateway {
                if !route.onlink && !n.reachable(gw, route.oif) {
                    return Err(Error::kernel(ctx, libc::ENETUNREACH));
                }
            } else if route.oif.is_none() {
                return Err(Error::kernel(ctx, libc::ENODEV));
            }
            let same = |r: &Route| {
                r.dst == route.dst
                    && r.table == route.table
                    && r.priority == route.priority
                    && (!beside || (r.gateway == route.gateway && r.oif == route.oif))
            };
            if n.all_routes().iter().any(same) {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            if beside {
                n.routes.insert(0, route.clone());
            } else {
                n.routes.push(route.clone());
            }
            Ok(())
        })
    }

    fn route_text(&self, route: &Route) -> String {
        let text = route.to_string();
        match route.oif {
            Some(oif) => text.replacen(
                &format!("dev #{oif}"),
                &format!("dev {}", self.name_of(oif)),
                1,
            ),
            None => text,
        }
    }

    /// Applies `f` to link `index`, ENODEV when it is missing.
    fn set(&mut self, index: u32, what: String, f: impl FnOnce(&mut FakeLink)) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("link set {name} {what}"), |m, ns| {
            let link = ns_mut(m, ns)
                .links
                .get_mut(&index)
                .ok_or_else(|| no_device(format!("failed to {what} {name}")))?;
            f(link);
            Ok(())
        })
    }
}

impl Netlink for FakeSocket {
    type Ns = FakeNs;

    fn link_by_name(&mut self, name: &str) -> Result<Link> {
        let ctx = || format!("failed to find link {name:?}");
        validate_ifname(name).map_err(|e| e.context(ctx()))?;
        self.op(format!("link get {name}"), |m, ns| {
            ns_ref(m, ns)
                .by_name(name)
                .map(|l| report(m, ns, l))
                .ok_or_else(|| no_device(ctx()))
        })
    }

    fn link_by_index(&mut self, index: u32) -> Result<Link> {
        self.op(format!("link get #{index}"), |m, ns| {
            ns_ref(m, ns)
                .links
                .get(&index)
                .map(|l| report(m, ns, l))
                .ok_or_else(|| no_device(format!("failed to find link with index {index}")))
        })
    }

    fn links(&mut self) -> Result<Vec<Link>> {
        self.op("link show".into(), |m, ns| {
            Ok(ns_ref(m, ns)
                .links
                .values()
                .map(|l| report(m, ns, l))
                .collect())
        })
    }

    fn add_link(&mut self, msg: LinkMessage, netns: Option<&FakeNs>) -> Result<()> {
        let new = decode_new_link(&msg);
        let here = self.ns.clone();
        self.op(describe_new_link(&new, netns), |m, ns| {
            let ctx = format!("failed to create link {:?}", new.name);
            validate_ifname(&new.name).map_err(|e| e.context(&ctx))?;
            let target = netns.map(|n| n.0.clone()).unwrap_or_else(|| ns.to_string());
            if !m.state.namespaces.contains_key(&target) {
                return Err(gone(&target).context(&ctx));
            }
            let parent_mtu = match new.parent {
                Some(p) => match ns_ref(m, &here).links.get(&p) {
                    Some(l) => Some(l.mtu),
                    None => return Err(no_device(ctx)),
                },
                None => None,
            };
            if ns_ref(m, &target).by_name(&new.name).is_some() {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            let mtu = new.mtu.or(parent_mtu).unwrap_or(1500);
            if parent_mtu.is_some_and(|p| mtu > p) {
                return Err(Error::kernel(ctx, libc::EINVAL));
            }
            let index = m.next_index;
            m.next_index += 1;
            let link = FakeLink {
                index,
                name: new.name.clone(),
                kind: new.kind.clone(),
                data: new.data.clone(),
                mtu,
                mac: new.mac.unwrap_or(mac_for(index)),
                up: false,
                master: None,
                parent: new.parent,
                alias: None,
            };
            ns_mut(m, &target).links.insert(index, link);
            Ok(())
        })
    }

    fn delete_link(&mut self, index: u32) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("link del {name}"), |m, ns| {
            let n = ns_mut(m, ns);
            if !n.links.contains_key(&index) {
                return Err(no_device(format!("failed to delete link {name}")));
            }
            n.forget_link(index);
            let removed = n.links.remove(&index);
            remove_veth_peer(m, removed.as_ref());
            Ok(())
        })
    }

    fn delete_link_by_name(&mut self, name: &str) -> Result<bool> {
        validate_ifname(name).map_err(|e| e.context(format!("failed to delete link {name:?}")))?;
        self.op(format!("link del {name}"), |m, ns| {
            let n = ns_mut(m, ns);
            let Some(index) = n.by_name(name).map(|l| l.index) else {
                return Ok(false);
            };
            n.forget_link(index);
            let removed = n.links.remove(&index);
            remove_veth_peer(m, removed.as_ref());
            Ok(true)
        })
    }

    fn set_link_up(&mut self, index: u32) -> Result<()> {
        self.set(index, "up".into(), |l| l.up = true)
    }

    fn set_link_down(&mut self, index: u32) -> Result<()> {
        let r = self.set(index, "down".into(), |l| l.up = false);
        if r.is_ok() {
            // The kernel flushes the routes through a link that goes down.
            let mut m = self.kernel.lock();
            ns_mut(&mut m, &self.ns)
                .routes
                .retain(|r| r.oif != Some(index));
        }
        r
    }

    fn set_link_name(&mut self, index: u32, name: &str) -> Result<()> {
        validate_ifname(name)?;
        let old = self.name_of(index);
        self.op(format!("link set {old} name {name}"), |m, ns| {
            let ctx = format!("failed to rename to {name:?} {old}");
            let n = ns_mut(m, ns);
            if !n.links.contains_key(&index) {
                return Err(no_device(ctx));
            }
            if n.by_name(name).is_some_and(|l| l.index != index) {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            let moved: Vec<(String, String)> = n
                .sysctls
                .iter()
                .filter(|(k, _)| conf_ifname(k) == Some(old.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in moved {
                n.sysctls.remove(&k);
                let renamed = k.replacen(&format!("/conf/{old}/"), &format!("/conf/{name}/"), 1);
                n.sysctls.insert(renamed, v);
            }
            if let Some(l) = n.links.get_mut(&index) {
                l.name = name.to_string();
            }
            Ok(())
        })
    }

    fn set_link_mtu(&mut self, index: u32, mtu: u32) -> Result<()> {
        self.set(index, format!("mtu {mtu}"), |l| l.mtu = mtu)
    }

    fn set_link_mac(&mut self, index: u32, mac: &[u8; 6]) -> Result<()> {
        let mac = *mac;
        let r = self.set(index, format!("address {}", format_mac(&mac)), |l| {
            l.mac = mac
        });
        if r.is_ok() {
            ns_mut(&mut self.kernel.lock(), &self.ns)
                .mac_set
                .insert(index);
        }
        r
    }

    fn set_link_master(&mut self, index: u32, master: u32) -> Result<()> {
        let master_name = self.name_of(master);
        let name = self.name_of(index);
        self.op(format!("link set {name} master {master_name}"), |m, ns| {
            let ctx = format!("failed to attach to controller {master} {name}");
            let n = ns_mut(m, ns);
            if !n.links.contains_key(&master) {
                return Err(no_device(ctx));
            }
            let link = n.links.get_mut(&index).ok_or_else(|| no_device(ctx))?;
            link.master = Some(master);
            n.join_bridge(index, master);
            Ok(())
        })
    }

    fn move_link(&mut self, index: u32, target: &FakeNs) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("link set {name} netns {}", target.0), |m, ns| {
            let ctx = format!("failed to move to netns {} {name}", target.0);
            if !m.state.namespaces.contains_key(&target.0) {
                return Err(gone(&target.0).context(ctx));
            }
            let Some(mut link) = ns_ref(m, ns).links.get(&index).cloned() else {
                return Err(no_device(ctx));
            };
            if ns_ref(m, &target.0).by_name(&link.name).is_some() {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            let n = ns_mut(m, ns);
            n.forget_link(index);
            n.links.remove(&index);
            link.up = false;
            link.master = None;
            ns_mut(m, &target.0).links.insert(index, link);
            Ok(())
        })
    }

    fn add_address(&mut self, index: u32, address: IpNetwork, opts: &AddressOptions) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("addr add {address} dev {name}"), |m, ns| {
            let ctx = format!("failed to add address {address} to {name}");
            let n = ns_mut(m, ns);
            if !n.links.contains_key(&index) {
                return Err(no_device(ctx));
            }
            let present = n
                .addresses
                .iter()
                .any(|(i, a)| *i == index && *a == address);
            if present && !opts.replace {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            if !present {
                n.addresses.push((index, address));
            }
            Ok(())
        })
    }

    fn delete_address(&mut self, index: u32, address: IpNetwork) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("addr del {address} dev {name}"), |m, ns| {
            let n = ns_mut(m, ns);
            let before = n.addresses.len();
            n.addresses.retain(|(i, a)| !(*i == index && *a == address));
            if n.addresses.len() == before {
                return Err(Error::kernel(
                    format!("failed to delete address {address} from {name}"),
                    libc::EADDRNOTAVAIL,
                ));
            }
            Ok(())
        })
    }

    fn addresses(&mut self, index: Option<u32>, family: Family) -> Result<Vec<Address>> {
        let what = match index {
            Some(i) => format!("addr show dev {}", self.name_of(i)),
            None => "addr show".to_string(),
        };
        self.op(what, |m, ns| {
            Ok(ns_ref(m, ns)
                .addresses
                .iter()
                .filter(|(i, a)| index.is_none_or(|x| x == *i) && family.matches(a.ip()))
                .filter_map(|(i, a)| Address::from_message(address_message(*i, *a)))
                .collect())
        })
    }

    fn add_route(&mut self, route: &Route) -> Result<()> {
        self.insert_route(route, false)
    }

    fn prepend_route(&mut self, route: &Route) -> Result<()> {
        self.insert_route(route, true)
    }

    fn delete_route(&mut self, route: &Route) -> Result<()> {
        let wanted = normalized(route.clone());
        let text = self.route_text(&wanted);
        self.op(format!("route del {text}"), |m, ns| {
            let n = ns_mut(m, ns);
            let at = n.routes.iter().position(|r| {
                r.dst == wanted.dst
                    && r.table == wanted.table
                    && (wanted.gateway.is_none() || r.gateway == wanted.gateway)
                    && (wanted.oif.is_none() || r.oif == wanted.oif)
            });
            match at {
                Some(i) => {
                    n.routes.remove(i);
                    Ok(())
                }
                // A connected route goes too (the address stays).
                None if withdraw_connected(n, &wanted) => Ok(()),
                None => Err(Error::kernel(
                    format!("failed to delete route {wanted}"),
                    libc::ESRCH,
                )),
            }
        })
    }

    fn routes(&mut self, family: Family, table: Option<u32>) -> Result<Vec<Route>> {
        self.op("route show".into(), |m, ns| {
            Ok(ns_ref(m, ns)
                .all_routes()
                .into_iter()
                .filter(|r| family.matches(r.dst.ip()) && table.is_none_or(|t| r.table_id() == t))
                .collect())
        })
    }

    // bridge
    fn ensure_bridge(&mut self, name: &str, opts: &BridgeOptions) -> Result<Link> {
        // As the live socket: a lookup, a creation when missing, a lookup of what was made.
        let ctx = || format!("failed to create bridge {name:?}");
        if let Some(link) = self.find_link(name).map_err(|e| e.context(ctx()))? {
            return checked_bridge(link).map_err(|e| e.context(ctx()));
        }
        let mut what = format!("link add {name}");
        if let Some(m) = opts.mac {
            what.push_str(&format!(" address {}", format_mac(&m)));
        }
        if let Some(v) = opts.mtu {
            what.push_str(&format!(" mtu {v}"));
        }
        if let Some(q) = opts.txqueuelen {
            what.push_str(&format!(" txqueuelen {q}"));
        }
        what.push_str(" type bridge");
        if let Some(v) = opts.vlan_filtering {
            what.push_str(&format!(" vlan_filtering {}", u8::from(v)));
        }
        let opts = opts.clone();
        let created = self.op(what, |m, ns| {
            if ns_ref(m, ns).by_name(name).is_some() {
                return Err(Error::kernel(ctx(), libc::EEXIST));
            }
            let index = m.next_index;
            m.next_index += 1;
            let link = FakeLink {
                index,
                name: name.to_string(),
                kind: Some("bridge".into()),
                data: Some(bridge_data(opts.vlan_filtering.unwrap_or(false), 1)),
                mtu: opts.mtu.unwrap_or(1500),
                mac: opts.mac.unwrap_or(mac_for(index)),
                up: false,
                master: None,
                parent: None,
                alias: None,
            };
            let n = ns_mut(m, ns);
            n.links.insert(index, link);
            if opts.mac.is_some() {
                n.mac_set.insert(index);
            }
            Ok(())
        });
        match created {
            // Created meanwhile by another ADD: fine if it is a bridge.
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e),
        }
        let link = self.link_by_name(name).map_err(|e| e.context(ctx()))?;
        checked_bridge(link).map_err(|e| e.context(ctx()))
    }

    fn set_bridge_vlan_filtering(&mut self, name: &str, on: bool) -> Result<()> {
        let what = format!(
            "link set {name} type bridge vlan_filtering {}",
            u8::from(on)
        );
        self.op(what, |m, ns| {
            let link = ns_mut(m, ns)
                .links
                .values_mut()
                .find(|l| l.name == name)
                .ok_or_else(|| no_device(format!("failed to find link {name:?}")))?;
            if link.kind.as_deref() != Some("bridge") {
                return Err(Error::kernel(
                    format!("failed to set vlan_filtering on {name}"),
                    libc::EOPNOTSUPP,
                ));
            }
            let pvid = bridge_default_pvid(link);
            link.data = Some(bridge_data(on, pvid));
            Ok(())
        })
    }

    fn set_link_promisc(&mut self, index: u32, on: bool) -> Result<()> {
        let name = self.name_of(index);
        let what = if on { "on" } else { "off" };
        self.op(format!("link set {name} promisc {what}"), |m, ns| {
            let n = ns_mut(m, ns);
            if !n.links.contains_key(&index) {
                return Err(no_device(format!(
                    "failed to set promiscuous mode {what} {name}"
                )));
            }
            if on {
                n.promisc.insert(index);
            } else {
                n.promisc.remove(&index);
            }
            Ok(())
        })
    }

    fn create_veth(&mut self, spec: &VethSpec<'_>, peer_netns: Option<&FakeNs>) -> Result<()> {
        let ctx = format!(
            "failed to create veth pair {:?}/{:?}",
            spec.name, spec.peer_name
        );
        validate_ifname(spec.name).map_err(|e| e.context(&ctx))?;
        validate_ifname(spec.peer_name).map_err(|e| e.context(&ctx))?;
        let mut what = format!("link add {}", spec.name);
        if let Some(m) = spec.mac {
            what.push_str(&format!(" address {}", format_mac(&m)));
        }
        if let Some(v) = spec.mtu {
            what.push_str(&format!(" mtu {v}"));
        }
        if let Some(master) = spec.master {
            what.push_str(&format!(" master {}", self.name_of(master)));
        }
        if spec.up {
            what.push_str(" up");
        }
        what.push_str(&format!(" type veth peer name {}", spec.peer_name));
        if let Some(m) = spec.peer_mac {
            what.push_str(&format!(" address {}", format_mac(&m)));
        }
        if let Some(ns) = peer_netns {
            what.push_str(&format!(" netns {}", ns.0));
        }
        if spec.peer_up {
            what.push_str(" up");
        }
        let spec = OwnedVeth::from(spec);
        self.op(what, |m, ns| {
            let peer_ns = peer_netns.map_or_else(|| ns.to_string(), |p| p.0.clone());
            if !m.state.namespaces.contains_key(&peer_ns) {
                return Err(gone(&peer_ns).context(&ctx));
            }
            let here = ns_ref(m, ns);
            let clash = here.by_name(&spec.name).is_some()
                || ns_ref(m, &peer_ns).by_name(&spec.peer_name).is_some()
                || (peer_ns == ns && spec.name == spec.peer_name);
            if clash {
                return Err(Error::kernel(ctx, libc::EEXIST));
            }
            if let Some(master) = spec.master {
                let is_bridge = |l: &FakeLink| l.kind.as_deref() == Some("bridge");
                if !here.links.get(&master).is_some_and(is_bridge) {
                    return Err(no_device(ctx));
                }
            }
            let (index, peer_index) = (m.next_index, m.next_index + 1);
            m.next_index += 2;
            let end = |index, name: &str, mac: Option<[u8; 6]>, up, peer| FakeLink {
                index,
                name: name.to_string(),
                kind: Some("veth".into()),
                data: None,
                mtu: spec.mtu.unwrap_or(1500),
                mac: mac.unwrap_or(mac_for(index)),
                up,
                master: None,
                // A veth reports its peer's ifindex as IFLA_LINK.
                parent: Some(peer),
                alias: None,
            };
            let host_end = end(index, &spec.name, spec.mac, spec.up, peer_index);
            let peer_end = end(
                peer_index,
                &spec.peer_name,
                spec.peer_mac,
                spec.peer_up,
                index,
            );
            ns_mut(m, &peer_ns).links.insert(peer_index, peer_end);
            let n = ns_mut(m, ns);
            n.links.insert(index, host_end);
            if let Some(master) = spec.master {
                if let Some(l) = n.links.get_mut(&index) {
                    l.master = Some(master);
                }
                n.join_bridge(index, master);
            }
            Ok(())
        })
    }

    fn create_veth_described(
        &mut self,
        spec: &VethSpec<'_>,
        peer_netns: Option<&FakeNs>,
        peer_watch: &mut FakeSocket,
    ) -> Result<Option<(Link, Link)>> {
        self.create_veth(spec, peer_netns)?;
        let m = self.kernel.lock();
        if m.no_new_link_echo {
            return Ok(None);
        }
        let end = |ns: &str, name: &str| ns_ref(&m, ns).by_name(name).map(|l| report(&m, ns, l));
        Ok(end(&self.ns, spec.name).zip(end(&peer_watch.ns, spec.peer_name)))
    }

    fn set_link_alias(&mut self, index: u32, alias: &str) -> Result<()> {
        let what = format!("alias {alias:?}");
        let alias = (!alias.is_empty()).then(|| alias.to_string());
        self.set(index, what, |l| l.alias = alias)
    }

    fn set_bridge_port_flags(&mut self, index: u32, flags: &PortFlags) -> Result<()> {
        let on = |b: bool| if b { "on" } else { "off" };
        let mut what = String::new();
        for (key, v) in [
            ("hairpin", flags.hairpin),
            ("isolated", flags.isolated),
            ("learning", flags.learning),
        ] {
            if let Some(v) = v {
                what.push_str(&format!(" {key} {}", on(v)));
            }
        }
        // The live socket sends nothing when there is nothing to set.
        if what.is_empty() {
            return Ok(());
        }
        let name = self.name_of(index);
        let flags = *flags;
        self.op(format!("bridge link set dev {name}{what}"), |m, ns| {
            let port = port_mut(
                ns_mut(m, ns),
                index,
                format!("failed to set bridge port flags {flags:?} on {name}"),
            )?;
            if let Some(v) = flags.hairpin {
                port.hairpin = v;
            }
            if let Some(v) = flags.isolated {
                port.isolated = v;
            }
            if let Some(v) = flags.learning {
                port.learning = v;
            }
            Ok(())
        })
    }

    fn bridge_vlan_add(&mut self, index: u32, vid: u16, pvid: bool, untagged: bool) -> Result<()> {
        let name = self.name_of(index);
        let mut what = format!("bridge vlan add vid {vid} dev {name}");
        if pvid {
            what.push_str(" pvid");
        }
        if untagged {
            what.push_str(" untagged");
        }
        self.op(what, |m, ns| {
            let ctx = format!("failed to add VLAN {vid} to bridge port {name}");
            if !(1..=4094).contains(&vid) {
                return Err(Error::kernel(ctx, libc::EINVAL));
            }
            let port = port_mut(ns_mut(m, ns), index, ctx)?;
            // A port has one PVID: a new one takes the flag from the old.
            if pvid {
                for v in port.vlans.values_mut() {
                    v.pvid = false;
                }
            }
            port.vlans.insert(vid, FakeVlan { pvid, untagged });
            Ok(())
        })
    }

    fn bridge_vlan_del(&mut self, index: u32, vid: u16) -> Result<()> {
        let name = self.name_of(index);
        self.op(format!("bridge vlan del vid {vid} dev {name}"), |m, ns| {
            let ctx = format!("failed to delete VLAN {vid} from bridge port {name}");
            port_mut(ns_mut(m, ns), index, ctx)?.vlans.remove(&vid);
            Ok(())
        })
    }
}

impl Kernel for FakeKernel {
    type Ns = FakeNs;
    type Socket = FakeSocket;

    fn socket(&self) -> Result<FakeSocket> {
        self.socket_in(&FakeNs(HOST.into()))
    }

    fn open_netns(&self, path: &str) -> Result<FakeNs> {
        self.record(format!("open netns {path}"))
            .map_err(|e| e.context(format!("failed to open netns {path:?}")))?;
        if self.lock().state.namespaces.contains_key(path) {
            Ok(FakeNs(path.to_string()))
        } else {
            Err(Error::NetnsNotFound {
                context: format!("failed to open netns {path:?}"),
                path: path.to_string(),
            })
        }
    }

    fn socket_in(&self, ns: &FakeNs) -> Result<FakeSocket> {
        self.op(&ns.0, "socket".into(), |_, _| Ok(()))?;
        Ok(FakeSocket {
            kernel: self.clone(),
            ns: ns.0.clone(),
        })
    }

    fn sysctl_read(&self, ns: &FakeNs, key: &str) -> Result<String> {
        self.op(&ns.0, format!("sysctl {key}"), |m, ns| {
            let n = ns_ref(m, ns);
            if let Some(v) = n.sysctls.get(key) {
                return Ok(v.clone());
            }
            match conf_ifname(key) {
                Some("all" | "default") => Ok("0".into()),
                Some(ifname) if n.by_name(ifname).is_some() => Ok("0".into()),
                _ => Err(Error::io(
                    format!("failed to read sysctl {key}"),
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                )),
            }
        })
    }

    fn sysctl_write(&self, ns: &FakeNs, key: &str, value: &str) -> Result<()> {
        self.op(&ns.0, format!("sysctl -w {key}={value}"), |m, ns| {
            let n = ns_mut(m, ns);
            let known = match conf_ifname(key) {
                Some("all" | "default") => true,
                Some(ifname) => n.by_name(ifname).is_some(),
                None => true,
            };
            if !known {
                return Err(Error::io(
                    format!("failed to write sysctl {key}"),
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                ));
            }
            n.sysctls.insert(key.to_string(), value.to_string());
            Ok(())
        })
    }

    fn create_tap(&self, ns: &FakeNs, spec: &TapSpec<'_>) -> Result<()> {
        validate_ifname(spec.name)?;
        let mut what = format!("tap add {}", spec.name);
        if spec.multi_queue {
            what.push_str(" multi_queue");
        }
        if spec.vnet_hdr {
            what.push_str(" vnet_hdr");
        }
        if let Some(u) = spec.owner {
            what.push_str(&format!(" user {u}"));
        }
        if let Some(g) = spec.group {
            what.push_str(&format!(" group {g}"));
        }
        let name = spec.name.to_string();
        self.op(&ns.0, what, |m, ns| {
            let ctx = format!("failed to create tap {name:?}: TUNSETIFF");
            if ns_ref(m, ns).by_name(&name).is_some() {
                return Err(Error::io(
                    ctx,
                    std::io::Error::from_raw_os_error(libc::EBUSY),
                ));
            }
            let index = m.next_index;
            m.next_index += 1;
            let link = FakeLink {
                index,
                name,
                kind: Some("tun".into()),
                data: None,
                mtu: 1500,
                mac: mac_for(index),
                up: false,
                master: None,
                parent: None,
                alias: None,
            };
            ns_mut(m, ns).links.insert(index, link);
            Ok(())
        })
    }

    // The caller's own netns (ptp, host-device, bridge)

    fn current_netns(&self) -> Result<FakeNs> {
        self.record(format!("open netns {HOST}"))
            .map_err(|e| e.context("failed to open the current thread's netns"))?;
        Ok(FakeNs(HOST.into()))
    }
    fn host_sysctl_write(&self, key: &str, value: &str) -> Result<()> {
        self.sysctl_write(&FakeNs(HOST.into()), key, value)
    }

    fn host_sysctl_write_if_different(&self, key: &str, value: &str) -> Result<bool> {
        self.sysctl_write_if_different(&FakeNs(HOST.into()), key, value)
    }

    /// The model's MAC mark as sysfs shows it; an injected failure of the read stands for a
    /// sysfs that does not show this link (mounted for another netns).
    fn host_mac_origin(&self, link: &Link) -> Option<MacOrigin> {
        let what = format!("cat /sys/class/net/{}/addr_assign_type", link.name);
        self.op(HOST, what, |m, ns| {
            let n = ns_ref(m, ns);
            let shown = n
                .links
                .get(&link.index)
                .is_some_and(|l| l.name == link.name && l.mac.as_slice() == link.mac.as_slice());
            Ok(shown.then(|| {
                if n.mac_set.contains(&link.index) {
                    MacOrigin::Set
                } else {
                    MacOrigin::Random
                }
            }))
        })
        .ok()
        .flatten()
    }
}

// bridge

/// The bridge state of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePort {
    pub hairpin: bool,
    pub isolated: bool,
    pub learning: bool,
    /// The port's VLANs by ID.
    pub vlans: BTreeMap<u16, FakeVlan>,
}

/// The flags of one VLAN of a bridge port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeVlan {
    pub pvid: bool,
    pub untagged: bool,
}

impl FakeNamespace {
    /// Link `index` joins bridge `master` (when it is one): a fresh port, with learning on,
    /// hairpin and isolation off and the bridge's default PVID as untagged PVID, and a bridge
    /// whose MAC was never set taking its lowest port's.
    fn join_bridge(&mut self, index: u32, master: u32) {
        let Some(br) = self.links.get(&master) else {
            return;
        };
        if br.kind.as_deref() != Some("bridge") {
            return;
        }
        let pvid = bridge_default_pvid(br);
        let mut vlans = BTreeMap::new();
        if pvid != 0 {
            vlans.insert(
                pvid,
                FakeVlan {
                    pvid: true,
                    untagged: true,
                },
            );
        }
        self.ports.insert(
            index,
            FakePort {
                hairpin: false,
                isolated: false,
                learning: true,
                vlans,
            },
        );
        self.recalculate_bridge_mac(master);
    }

    /// Link `index` goes away (deleted, or moved to another namespace): its port state,
    /// promiscuous mode and MAC mark go; its bridge, if any, recomputes its MAC; a bridge's
    /// ports are ports no more.
    fn leave_bridge(&mut self, index: u32) {
        self.promisc.remove(&index);
        self.mac_set.remove(&index);
        if self.ports.remove(&index).is_some() {
            if let Some(master) = self.links.get(&index).and_then(|l| l.master) {
                if let Some(l) = self.links.get_mut(&index) {
                    l.master = None;
                }
                self.recalculate_bridge_mac(master);
            }
        }
        let ports: Vec<u32> = self
            .links
            .values()
            .filter(|l| l.master == Some(index))
            .map(|l| l.index)
            .collect();
        for p in ports {
            self.ports.remove(&p);
        }
    }

    /// A bridge without a MAC set takes the lowest MAC of its ports; with no port, it keeps
    /// the one it has.
    fn recalculate_bridge_mac(&mut self, bridge: u32) {
        if self.mac_set.contains(&bridge) {
            return;
        }
        let lowest = self
            .links
            .values()
            .filter(|l| l.master == Some(bridge))
            .map(|l| l.mac)
            .min();
        if let (Some(mac), Some(br)) = (lowest, self.links.get_mut(&bridge)) {
            br.mac = mac;
        }
    }
}

/// `IFLA_INFO_DATA` of a bridge as the kernel reports the parts the plugins read.
fn bridge_data(vlan_filtering: bool, default_pvid: u16) -> InfoData {
    InfoData::Bridge(vec![
        InfoBridge::VlanFiltering(vlan_filtering),
        InfoBridge::VlanDefaultPvid(default_pvid),
    ])
}

fn bridge_default_pvid(l: &FakeLink) -> u16 {
    match &l.data {
        Some(InfoData::Bridge(info)) => info
            .iter()
            .find_map(|i| match i {
                InfoBridge::VlanDefaultPvid(p) => Some(*p),
                _ => None,
            })
            .unwrap_or(1),
        _ => 1,
    }
}

/// What [`crate::Socket::ensure_bridge`] accepts as an existing bridge.
fn checked_bridge(link: Link) -> Result<Link> {
    if link.is_kind("bridge") {
        Ok(link)
    } else {
        let detail = format!("{:?} already exists but is not a bridge", link.name);
        Err(Error::conflict("", detail))
    }
}

/// The port state of link `index`: ENODEV when the link is missing, EOPNOTSUPP when it is
/// no bridge port.
fn port_mut(n: &mut FakeNamespace, index: u32, ctx: String) -> Result<&mut FakePort> {
    if !n.links.contains_key(&index) {
        return Err(no_device(ctx));
    }
    n.ports
        .get_mut(&index)
        .ok_or_else(|| Error::kernel(ctx, libc::EOPNOTSUPP))
}

/// A deleted veth takes its peer with it, wherever the peer is.
fn remove_veth_peer(m: &mut Model, removed: Option<&FakeLink>) {
    let Some(l) = removed.filter(|l| l.kind.as_deref() == Some("veth")) else {
        return;
    };
    let Some(peer) = l.parent else {
        return;
    };
    let at = m.state.namespaces.iter().find_map(|(key, n)| {
        n.links
            .get(&peer)
            .filter(|p| p.kind.as_deref() == Some("veth") && p.parent == Some(l.index))
            .map(|_| key.clone())
    });
    if let Some(key) = at {
        let n = ns_mut(m, &key);
        n.forget_link(peer);
        n.links.remove(&peer);
    }
}

/// The link as the kernel reports it, with what the model keeps beside it: promiscuous
/// mode, and a veth's carrier, which needs both ends up.
fn report(m: &Model, ns: &str, l: &FakeLink) -> Link {
    // What the model's sysctl read answers for the link: its own value, else 0.
    let accept_ra = ns_ref(m, ns)
        .sysctls
        .get(&format!("net/ipv6/conf/{}/accept_ra", l.name))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut link = to_link(l, accept_ra);
    if ns_ref(m, ns).promisc.contains(&l.index) {
        link.flags |= LinkFlags::Promisc;
        link.message.header.flags |= LinkFlags::Promisc;
    }
    if l.up && l.kind.as_deref() == Some("veth") {
        let peer_up = l.parent.is_some_and(|p| {
            m.state
                .namespaces
                .values()
                .filter_map(|n| n.links.get(&p))
                .any(|p| p.kind.as_deref() == Some("veth") && p.parent == Some(l.index) && p.up)
        });
        if !peer_up {
            let no_carrier = LinkFlags::Running | LinkFlags::LowerUp;
            link.flags.remove(no_carrier);
            link.message.header.flags.remove(no_carrier);
            link.operstate = OperState::LowerLayerDown;
        }
    }
    link
}

/// A [`VethSpec`] without its borrowed netns, to move into the model's closure.
struct OwnedVeth {
    name: String,
    peer_name: String,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    peer_mac: Option<[u8; 6]>,
    master: Option<u32>,
    up: bool,
    peer_up: bool,
}

impl From<&VethSpec<'_>> for OwnedVeth {
    fn from(s: &VethSpec<'_>) -> OwnedVeth {
        OwnedVeth {
            name: s.name.to_string(),
            peer_name: s.peer_name.to_string(),
            mtu: s.mtu,
            mac: s.mac,
            peer_mac: s.peer_mac,
            master: s.master,
            up: s.up,
            peer_up: s.peer_up,
        }
    }
}

#[cfg(test)]
mod bridge_tests {
    use super::*;

    #[test]
    fn bridges_ports_and_veth_pairs_follow_the_kernel_rules() {
        let k = FakeKernel::new();
        k.add_netns("/pod");
        let pod = k.open_netns("/pod").unwrap();
        let mut host = k.socket().unwrap();
        let br = host
            .ensure_bridge("br0", &BridgeOptions::default())
            .unwrap();
        assert!(br.bridge_info().contains(&InfoBridge::VlanFiltering(false)));
        // Adopted as it is the second time; another kind of link is refused.
        assert_eq!(
            host.ensure_bridge("br0", &BridgeOptions::default())
                .unwrap()
                .index,
            br.index
        );
        let eth0 = k.setup_link(HOST, "eth0", None, 1500);
        let e = host
            .ensure_bridge("eth0", &BridgeOptions::default())
            .unwrap_err();
        assert!(
            e.to_string().contains("already exists but is not a bridge"),
            "{e}"
        );

        let spec = VethSpec {
            name: "veth0",
            peer_name: "eth0",
            master: Some(br.index),
            up: true,
            ..Default::default()
        };
        // The peer name is free in the pod, though taken here.
        host.create_veth(&spec, Some(&pod)).unwrap();
        assert!(host.create_veth(&spec, Some(&pod)).unwrap_err().is_exists());
        let veth0 = host.link_by_name("veth0").unwrap();
        let mut cont = k.socket_in(&pod).unwrap();
        let peer = cont.link_by_name("eth0").unwrap();
        assert_eq!(
            (veth0.link, peer.link),
            (Some(peer.index), Some(veth0.index))
        );
        assert_eq!(
            (veth0.master, veth0.operstate),
            (Some(br.index), OperState::LowerLayerDown)
        );
        cont.set_link_up(peer.index).unwrap();
        assert_eq!(
            host.link_by_index(veth0.index).unwrap().operstate,
            OperState::Up
        );
        // An unpinned bridge took its port's MAC.
        assert_eq!(host.link_by_index(br.index).unwrap().mac, veth0.mac);

        // Port flags and VLANs need a port; one PVID per port.
        let e = host
            .set_bridge_port_flags(
                eth0,
                &PortFlags {
                    hairpin: Some(true),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        host.bridge_vlan_add(veth0.index, 10, true, true).unwrap();
        host.bridge_vlan_add(veth0.index, 20, false, false).unwrap();
        host.bridge_vlan_del(veth0.index, 30).unwrap();
        assert_eq!(
            host.bridge_vlan_add(veth0.index, 4095, false, false)
                .unwrap_err()
                .errno(),
            Some(libc::EINVAL)
        );
        let vlans = &k.namespace(HOST).ports[&veth0.index].vlans;
        assert_eq!(
            vlans
                .iter()
                .map(|(v, f)| (*v, f.pvid, f.untagged))
                .collect::<Vec<_>>(),
            [(1, false, true), (10, true, true), (20, false, false)]
        );
        host.set_link_promisc(br.index, true).unwrap();
        assert!(host.link_by_index(br.index).unwrap().is_promisc());

        // Deleting the pod end takes the host end and its port with it.
        assert!(cont.delete_link_by_name("eth0").unwrap());
        assert!(host.find_link("veth0").unwrap().is_none());
        assert!(k.namespace(HOST).ports.is_empty());
        let ops = k.ops();
        for op in [
            "host: link add veth0 master br0 up type veth peer name eth0 netns /pod",
            "host: bridge link set dev eth0 hairpin on",
            "host: bridge vlan add vid 10 dev veth0 pvid untagged",
            "host: bridge vlan del vid 30 dev veth0",
            "host: link set br0 promisc on",
        ] {
            assert!(ops.iter().any(|o| o == op), "{op}: {ops:#?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link_kinds::{macvlan_message, macvlan_mode, MacvlanSpec, NewLinkBase};
    use netlink_packet_route::link::MacVlanMode;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    #[test]
    fn links_follow_the_kernel_rules_and_every_operation_is_recorded() {
        let k = FakeKernel::new();
        k.add_netns("/pod");
        let eth0 = k.setup_link(HOST, "eth0", None, 1500);
        let pod = k.open_netns("/pod").unwrap();
        let mut host = k.socket().unwrap();
        let spec = MacvlanSpec {
            base: NewLinkBase {
                name: "m0",
                parent: Some(eth0),
                mtu: Some(1400),
                ..Default::default()
            },
            mode: MacVlanMode::Bridge,
            bc_queue_len: None,
        };
        host.add_link(macvlan_message(&spec), Some(&pod)).unwrap();
        let e = host
            .add_link(macvlan_message(&spec), Some(&pod))
            .unwrap_err();
        assert!(e.is_exists(), "{e}");
        let mut cont = k.socket_in(&pod).unwrap();
        let m0 = cont.link_by_name("m0").unwrap();
        assert_eq!(macvlan_mode(&m0), Some(MacVlanMode::Bridge));
        assert_eq!((m0.mtu, m0.is_up()), (1400, false));
        assert!(host.link_by_name("m0").unwrap_err().is_not_found());

        // A route needs its device up and its gateway on a connected prefix.
        let gw = Route::new(net("0.0.0.0/0")).via("10.1.0.1".parse().unwrap());
        cont.add_address(m0.index, net("10.1.0.5/24"), &AddressOptions::default())
            .unwrap();
        let e = cont.add_route(&gw.clone().dev(m0.index)).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENETDOWN));
        cont.set_link_up(m0.index).unwrap();
        cont.add_route(&gw.clone().dev(m0.index)).unwrap();
        assert_eq!(cont.default_route_link().unwrap().unwrap().name, "m0");
        let routes = cont.routes(Family::V4, Some(TABLE_MAIN)).unwrap();
        assert!(routes.iter().any(|r| r.dst_network() == net("10.1.0.0/24")));

        // Renaming and deleting take the link's sysctls, addresses and routes with it.
        k.sysctl_write(&pod, "net/ipv4/conf/m0/arp_notify", "1")
            .unwrap();
        cont.set_link_name(m0.index, "net1").unwrap();
        assert_eq!(
            k.sysctl_read(&pod, "net/ipv4/conf/net1/arp_notify")
                .unwrap(),
            "1"
        );
        assert!(cont.delete_link_by_name("net1").unwrap());
        assert!(!cont.delete_link_by_name("net1").unwrap());
        assert_eq!(k.namespace("/pod"), {
            let fresh = FakeKernel::new();
            fresh.add_netns("/pod");
            fresh.namespace("/pod")
        });
        assert_eq!(
            k.ops()[..4],
            [
                "open netns /pod",
                "host: socket",
                "host: link add m0 link #2 mtu 1400 netns /pod type macvlan",
                "host: link add m0 link #2 mtu 1400 netns /pod type macvlan",
            ]
        );
    }

    #[test]
    fn failures_are_injected_by_number_or_by_match_once() {
        let k = FakeKernel::new();
        let eth0 = k.setup_link(HOST, "eth0", None, 1500);
        let mut host = k.socket().unwrap();
        k.reset();
        k.fail_at(1);
        host.link_by_index(eth0).unwrap();
        let e = host.set_link_mtu(eth0, 1400).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        host.set_link_mtu(eth0, 1400).unwrap();
        k.fail_when_with(libc::EBUSY, |op| op.contains("link del"));
        assert_eq!(
            host.delete_link(eth0).unwrap_err().errno(),
            Some(libc::EBUSY)
        );
        host.delete_link(eth0).unwrap();
        assert_eq!(
            k.ops(),
            [
                "host: link get #2",
                "host: link set eth0 mtu 1400 (injected failure)",
                "host: link set eth0 mtu 1400",
                "host: link del eth0 (injected failure)",
                "host: link del eth0",
            ]
        );
        assert!(k.open_netns("/gone").unwrap_err().is_netns_not_found());
    }

    // ptp, ipvlan, host-device

    #[test]
    fn veth_pairs_connected_routes_aliases_and_a_dying_netns() {
        let k = FakeKernel::new();
        k.add_netns("/pod");
        let pod = k.open_netns("/pod").unwrap();
        let mut host = k.socket().unwrap();
        let spec = VethSpec {
            name: "veth0",
            peer_name: "eth0",
            mtu: Some(1400),
            up: true,
            ..Default::default()
        };
        host.create_veth(&spec, Some(&pod)).unwrap();
        assert!(host.create_veth(&spec, Some(&pod)).unwrap_err().is_exists());
        let (near, far) = (
            k.link(HOST, "veth0").unwrap(),
            k.link("/pod", "eth0").unwrap(),
        );
        assert_eq!(
            (near.parent, far.parent),
            (Some(far.index), Some(near.index))
        );
        assert_eq!((near.up, far.up, far.mtu), (true, false, 1400));

        // A connected route can go while its address stays; the gateway is then reached
        // through a device route.
        let mut cont = k.socket_in(&pod).unwrap();
        cont.add_address(far.index, net("10.1.0.5/24"), &AddressOptions::default())
            .unwrap();
        cont.set_link_up(far.index).unwrap();
        cont.delete_route(&Route::new(net("10.1.0.0/24")).dev(far.index))
            .unwrap();
        assert!(cont.routes(Family::V4, None).unwrap().is_empty());
        let via = Route::new(net("10.1.0.0/24"))
            .dev(far.index)
            .via("10.1.0.1".parse().unwrap());
        assert_eq!(
            cont.add_route(&via).unwrap_err().errno(),
            Some(libc::ENETUNREACH)
        );
        cont.add_route(&Route::new(net("10.1.0.1/32")).dev(far.index))
            .unwrap();
        cont.add_route(&via).unwrap();
        // Another next hop to the same place: refused by add, put first by prepend; an
        // identical route is refused by both.
        let mut other = Route::new(net("10.1.0.0/24"))
            .dev(far.index)
            .via("10.1.0.7".parse().unwrap());
        other.onlink = true;
        assert!(cont.add_route(&other).unwrap_err().is_exists());
        cont.prepend_route(&other).unwrap();
        assert!(cont.prepend_route(&via).unwrap_err().is_exists());
        let gateways: Vec<_> = cont
            .routes(Family::V4, None)
            .unwrap()
            .into_iter()
            .filter(|r| r.dst == net("10.1.0.0/24"))
            .map(|r| r.gateway)
            .collect();
        assert_eq!(gateways, [other.gateway, via.gateway]);

        // Deleting one end takes the other; an alias goes along to another netns.
        cont.delete_link(far.index).unwrap();
        assert!(k.link(HOST, "veth0").is_none());
        let nic = k.setup_link(HOST, "ens1", None, 1500);
        host.set_link_alias(nic, "ens1").unwrap();
        host.move_link(nic, &pod).unwrap();
        assert_eq!(
            k.link("/pod", "ens1").unwrap().alias.as_deref(),
            Some("ens1")
        );
        // A dying netns returns its physical devices to the host, renamed on a clash.
        k.setup_link(HOST, "ens1", Some("dummy"), 1500);
        k.remove_netns("/pod");
        let back = k.namespace(HOST).links[&nic].clone();
        assert_eq!((back.name, back.up), (format!("dev{nic}"), false));
        assert_eq!(k.current_netns().unwrap(), FakeNs(HOST.into()));
    }
}
