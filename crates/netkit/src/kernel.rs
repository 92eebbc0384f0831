//! The seam between a plugin's logic and the kernel: the operations the main plugins ask of
//! the kernel, as two traits, so the same logic runs on the live kernel ([`LiveKernel`], the
//! plugin binaries) or on an in-memory model (the `fake` module's `FakeKernel`, feature
//! `fake`, unit tests without root).
//!
//! [`Kernel`] is what a plugin sees of the whole machine: the calling thread's netns, other
//! namespaces by path, a netlink socket in each, their sysctls and tap devices. [`Netlink`] is
//! one namespace's socket. Both are used through generics (static dispatch): the live
//! implementations delegate to [`Socket`] and the free functions, so the binaries run the very
//! code they ran before the seam.

use ipnetwork::IpNetwork;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};

use crate::addr::{Address, AddressOptions, Family};
use crate::bridge_port::PortFlags;
use crate::error::Result;
use crate::link::{BridgeOptions, Link, VethSpec};
use crate::netlink::Socket;
use crate::netns::Netns;
use crate::route::{Route, TABLE_MAIN};
use crate::rule::Rule;
use crate::sysfs::MacOrigin;
use crate::tap::TapSpec;

/// The netlink operations of one network namespace (what [`Socket`] does for the plugins).
/// Errors are netkit's, with the same contexts and errnos as the live socket's, so callers
/// can test `is_not_found()` or `is_exists()` whatever the implementation.
pub trait Netlink {
    /// The namespace handle of the same kernel (where a link is born or moved to).
    type Ns;

    /// The link called `name` (ENODEV, `is_not_found()`, when missing).
    fn link_by_name(&mut self, name: &str) -> Result<Link>;
    /// The link with ifindex `index` (ENODEV when missing).
    fn link_by_index(&mut self, index: u32) -> Result<Link>;
    /// Every link of the namespace.
    fn links(&mut self) -> Result<Vec<Link>>;
    /// Sends an RTM_NEWLINK with CREATE|EXCL: the link is born in `netns` when given
    /// (`IFLA_NET_NS_FD`), here otherwise; EEXIST when the name is taken there.
    fn add_link(&mut self, msg: LinkMessage, netns: Option<&Self::Ns>) -> Result<()>;
    /// Deletes link `index` (ENODEV when gone).
    fn delete_link(&mut self, index: u32) -> Result<()>;
    /// Deletes the link called `name`; `Ok(false)` when there was none.
    fn delete_link_by_name(&mut self, name: &str) -> Result<bool>;
    fn set_link_up(&mut self, index: u32) -> Result<()>;
    fn set_link_down(&mut self, index: u32) -> Result<()>;
    fn set_link_name(&mut self, index: u32, name: &str) -> Result<()>;
    fn set_link_mtu(&mut self, index: u32, mtu: u32) -> Result<()>;
    fn set_link_mac(&mut self, index: u32, mac: &[u8; 6]) -> Result<()>;
    fn set_link_master(&mut self, index: u32, master: u32) -> Result<()>;
    /// Moves link `index` into `ns` (it arrives down, without addresses, under its name).
    fn move_link(&mut self, index: u32, ns: &Self::Ns) -> Result<()>;
    /// `ip addr add` (EEXIST when present, unless `opts.replace`).
    fn add_address(&mut self, index: u32, address: IpNetwork, opts: &AddressOptions) -> Result<()>;
    /// `ip addr del` (EADDRNOTAVAIL when absent).
    fn delete_address(&mut self, index: u32, address: IpNetwork) -> Result<()>;
    /// Addresses of link `index` (every link when `None`) in `family`.
    fn addresses(&mut self, index: Option<u32>, family: Family) -> Result<Vec<Address>>;
    /// `ip route add` (EEXIST when a route to the destination exists in the table, with
    /// the same priority).
    fn add_route(&mut self, route: &Route) -> Result<()>;
    /// `ip route prepend`: beside the destination's other routes (EEXIST only when an
    /// identical route exists). See [`Socket::prepend_route`].
    fn prepend_route(&mut self, route: &Route) -> Result<()>;
    /// `ip route del` (ESRCH when there is no such route).
    fn delete_route(&mut self, route: &Route) -> Result<()>;
    /// Routes of `family` in `table` (every table when `None`).
    fn routes(&mut self, family: Family, table: Option<u32>) -> Result<Vec<Route>>;
    /// Policy routing rules of `family` (CHECK looks up where sbr moved routes). None by
    /// default: a model without rules has none.
    fn rules(&mut self, _family: Family) -> Result<Vec<Rule>> {
        Ok(Vec::new())
    }

    /// Like [`Netlink::link_by_name`], but `Ok(None)` when it does not exist.
    fn find_link(&mut self, name: &str) -> Result<Option<Link>> {
        match self.link_by_name(name) {
            Ok(l) => Ok(Some(l)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The link of the first main-table default route with a single device (the uplink).
    fn default_route_link(&mut self) -> Result<Option<Link>> {
        let routes = self.routes(Family::Any, Some(TABLE_MAIN))?;
        match routes
            .iter()
            .filter(|r| r.dst.prefix() == 0)
            .find_map(|r| r.oif)
        {
            Some(oif) => self.link_by_index(oif).map(Some),
            None => Ok(None),
        }
    }

    // Veth pairs (bridge, ptp) and link aliases (host-device)

    /// Creates a veth pair in one request: `spec.name` here (enslaved to `spec.master`, up
    /// when `spec.up`), `spec.peer_name` born in `peer_netns` (here when `None`); the
    /// `spec.peer_netns` of the live type is ignored in favour of `peer_netns`. EEXIST when
    /// either name is taken in its namespace.
    fn create_veth(&mut self, spec: &VethSpec<'_>, peer_netns: Option<&Self::Ns>) -> Result<()>;
    /// [`Netlink::create_veth`], also returning both ends (here, then the peer) as the kernel
    /// described them while it created them, so that they need no lookup: `None` when it did
    /// not (before Linux 6.3). `peer_watch` is a socket in the peer's netns, which hears
    /// the peer's announcement.
    fn create_veth_described(
        &mut self,
        spec: &VethSpec<'_>,
        peer_netns: Option<&Self::Ns>,
        peer_watch: &mut Self,
    ) -> Result<Option<(Link, Link)>>;
    /// `ip link set dev X alias TEXT` (an empty text clears it).
    fn set_link_alias(&mut self, index: u32, alias: &str) -> Result<()>;

    // bridge

    /// The bridge `name`, created (down, with `opts`) when missing; an existing bridge is
    /// returned as it is, another kind of link is an error ("already exists but is not a
    /// bridge").
    fn ensure_bridge(&mut self, name: &str, opts: &BridgeOptions) -> Result<Link>;
    /// `ip link set NAME type bridge vlan_filtering 0|1` on an existing bridge.
    fn set_bridge_vlan_filtering(&mut self, name: &str, on: bool) -> Result<()>;
    /// `ip link set X promisc on|off`.
    fn set_link_promisc(&mut self, index: u32, on: bool) -> Result<()>;
    /// `bridge link set dev X hairpin|isolated|learning on|off` (only the flags given).
    fn set_bridge_port_flags(&mut self, index: u32, flags: &PortFlags) -> Result<()>;
    /// `bridge vlan add vid V dev X [pvid] [untagged]`.
    fn bridge_vlan_add(&mut self, index: u32, vid: u16, pvid: bool, untagged: bool) -> Result<()>;
    /// `bridge vlan del vid V dev X`; a VLAN the port does not have is not an error.
    fn bridge_vlan_del(&mut self, index: u32, vid: u16) -> Result<()>;
}

/// The kernel as a plugin sees it. Cheap to clone: an undo step keeps its own copy to reach
/// the namespaces again after the ADD that registered it has failed.
pub trait Kernel: Clone + 'static {
    /// An open network namespace.
    type Ns;
    /// A netlink socket bound to one namespace.
    type Socket: Netlink<Ns = Self::Ns>;

    /// A socket in the calling thread's netns (the plugin's "host" side).
    fn socket(&self) -> Result<Self::Socket>;
    /// Opens the netns at `path` ([`crate::Error::NetnsNotFound`] when it does not exist).
    fn open_netns(&self, path: &str) -> Result<Self::Ns>;
    /// A socket in `ns`.
    fn socket_in(&self, ns: &Self::Ns) -> Result<Self::Socket>;
    /// The sysctl `key` (`net/ipv4/conf/eth0/forwarding`) read inside `ns`.
    fn sysctl_read(&self, ns: &Self::Ns, key: &str) -> Result<String>;
    /// Writes the sysctl `key` inside `ns`.
    fn sysctl_write(&self, ns: &Self::Ns, key: &str, value: &str) -> Result<()>;
    /// Creates the persistent tap device `spec.name` inside `ns`.
    fn create_tap(&self, ns: &Self::Ns, spec: &TapSpec<'_>) -> Result<()>;

    /// Writes `key` only when it holds another value; whether it wrote.
    fn sysctl_write_if_different(&self, ns: &Self::Ns, key: &str, value: &str) -> Result<bool> {
        if self.sysctl_read(ns, key)?.trim() == value {
            return Ok(false);
        }
        self.sysctl_write(ns, key, value).map(|()| true)
    }

    // The caller's own netns (ptp, host-device, bridge)

    /// The calling thread's netns (where a device leaving a container goes).
    fn current_netns(&self) -> Result<Self::Ns>;
    /// Writes the sysctl `key` in the calling thread's netns (the plugin's host side).
    fn host_sysctl_write(&self, key: &str, value: &str) -> Result<()>;
    /// [`Kernel::host_sysctl_write`] only when `key` holds another value; whether it wrote.
    fn host_sysctl_write_if_different(&self, key: &str, value: &str) -> Result<bool>;
    /// How the kernel came by the MAC of `link` (a link of the calling thread's netns), which
    /// only sysfs tells; `None` when the mounted sysfs does not show this link
    /// ([`crate::sysfs`]).
    fn host_mac_origin(&self, link: &Link) -> Option<MacOrigin>;

    // bridge

    /// Applies `writes` inside `ns` in one visit (one namespace switch on the live kernel);
    /// the outcome of each, in order. `Err` only when `ns` cannot be entered.
    fn sysctl_write_all(
        &self,
        ns: &Self::Ns,
        writes: &[SysctlWrite<'_>],
    ) -> Result<Vec<Result<()>>> {
        Ok(writes
            .iter()
            .map(|w| {
                if w.only_if_different {
                    self.sysctl_write_if_different(ns, w.key, w.value)
                        .map(|_| ())
                } else {
                    self.sysctl_write(ns, w.key, w.value)
                }
            })
            .collect())
    }
}

/// One sysctl write of [`Kernel::sysctl_write_all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysctlWrite<'a> {
    pub key: &'a str,
    pub value: &'a str,
    /// Skip the write when the sysctl already holds `value`.
    pub only_if_different: bool,
}

/// The live kernel: netlink sockets, `/proc/sys`, `/dev/net/tun`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveKernel;

impl Kernel for LiveKernel {
    type Ns = Netns;
    type Socket = Socket;

    fn socket(&self) -> Result<Socket> {
        Socket::new()
    }
    fn open_netns(&self, path: &str) -> Result<Netns> {
        Netns::open(path)
    }
    fn socket_in(&self, ns: &Netns) -> Result<Socket> {
        Socket::open_in(ns)
    }
    fn sysctl_read(&self, ns: &Netns, key: &str) -> Result<String> {
        crate::sysctl::read_in(ns, key)
    }
    fn sysctl_write(&self, ns: &Netns, key: &str, value: &str) -> Result<()> {
        crate::sysctl::write_in(ns, key, value)
    }
    fn sysctl_write_if_different(&self, ns: &Netns, key: &str, value: &str) -> Result<bool> {
        crate::sysctl::write_if_different_in(ns, key, value)
    }
    fn create_tap(&self, ns: &Netns, spec: &TapSpec<'_>) -> Result<()> {
        crate::tap::create_tap(ns, spec)
    }

    // The caller's own netns (ptp, host-device, bridge)

    fn current_netns(&self) -> Result<Netns> {
        Netns::current()
    }
    fn host_sysctl_write(&self, key: &str, value: &str) -> Result<()> {
        crate::sysctl::write(key, value)
    }
    fn host_sysctl_write_if_different(&self, key: &str, value: &str) -> Result<bool> {
        crate::sysctl::write_if_different(key, value)
    }
    fn host_mac_origin(&self, link: &Link) -> Option<MacOrigin> {
        crate::sysfs::mac_origin(link)
    }
    fn sysctl_write_all(&self, ns: &Netns, writes: &[SysctlWrite<'_>]) -> Result<Vec<Result<()>>> {
        ns.run(|| {
            writes
                .iter()
                .map(|w| {
                    if w.only_if_different {
                        crate::sysctl::write_if_different(w.key, w.value).map(|_| ())
                    } else {
                        crate::sysctl::write(w.key, w.value)
                    }
                })
                .collect()
        })
    }
}

/// `msg` with `IFLA_NET_NS_FD` where iproute2 puts it (before `IFLA_LINK` and `IFLA_IFNAME`),
/// so a request built without a netns and given one here is byte for byte the one built with it.
fn born_in(mut msg: LinkMessage, ns: &Netns) -> LinkMessage {
    use std::os::fd::AsRawFd;
    let at = msg
        .attributes
        .iter()
        .position(|a| matches!(a, LinkAttribute::Link(_) | LinkAttribute::IfName(_)))
        .unwrap_or(msg.attributes.len());
    msg.attributes
        .insert(at, LinkAttribute::NetNsFd(ns.as_raw_fd()));
    msg
}

impl Netlink for Socket {
    type Ns = Netns;

    fn link_by_name(&mut self, name: &str) -> Result<Link> {
        Socket::link_by_name(self, name)
    }
    fn link_by_index(&mut self, index: u32) -> Result<Link> {
        Socket::link_by_index(self, index)
    }
    fn links(&mut self) -> Result<Vec<Link>> {
        Socket::links(self)
    }
    fn add_link(&mut self, msg: LinkMessage, netns: Option<&Netns>) -> Result<()> {
        match netns {
            Some(ns) => self.create_link(born_in(msg, ns)),
            None => self.create_link(msg),
        }
    }
    fn delete_link(&mut self, index: u32) -> Result<()> {
        Socket::delete_link(self, index)
    }
    fn delete_link_by_name(&mut self, name: &str) -> Result<bool> {
        Socket::delete_link_by_name(self, name)
    }
    fn set_link_up(&mut self, index: u32) -> Result<()> {
        Socket::set_link_up(self, index)
    }
    fn set_link_down(&mut self, index: u32) -> Result<()> {
        Socket::set_link_down(self, index)
    }
    fn set_link_name(&mut self, index: u32, name: &str) -> Result<()> {
        Socket::set_link_name(self, index, name)
    }
    fn set_link_mtu(&mut self, index: u32, mtu: u32) -> Result<()> {
        Socket::set_link_mtu(self, index, mtu)
    }
    fn set_link_mac(&mut self, index: u32, mac: &[u8; 6]) -> Result<()> {
        Socket::set_link_mac(self, index, mac)
    }
    fn set_link_master(&mut self, index: u32, master: u32) -> Result<()> {
        Socket::set_link_master(self, index, master)
    }
    fn move_link(&mut self, index: u32, ns: &Netns) -> Result<()> {
        Socket::move_link(self, index, ns)
    }
    fn add_address(&mut self, index: u32, address: IpNetwork, opts: &AddressOptions) -> Result<()> {
        Socket::add_address(self, index, address, opts)
    }
    fn delete_address(&mut self, index: u32, address: IpNetwork) -> Result<()> {
        Socket::delete_address(self, index, address)
    }
    fn addresses(&mut self, index: Option<u32>, family: Family) -> Result<Vec<Address>> {
        Socket::addresses(self, index, family)
    }
    fn add_route(&mut self, route: &Route) -> Result<()> {
        Socket::add_route(self, route)
    }
    fn prepend_route(&mut self, route: &Route) -> Result<()> {
        Socket::prepend_route(self, route)
    }
    fn delete_route(&mut self, route: &Route) -> Result<()> {
        Socket::delete_route(self, route)
    }
    fn routes(&mut self, family: Family, table: Option<u32>) -> Result<Vec<Route>> {
        Socket::routes(self, family, table)
    }
    fn rules(&mut self, family: Family) -> Result<Vec<Rule>> {
        Socket::rules(self, family)
    }
    fn find_link(&mut self, name: &str) -> Result<Option<Link>> {
        Socket::find_link(self, name)
    }
    fn default_route_link(&mut self) -> Result<Option<Link>> {
        Socket::default_route_link(self)
    }

    // Veth pairs (bridge, ptp) and link aliases (host-device)

    fn create_veth(&mut self, spec: &VethSpec<'_>, peer_netns: Option<&Netns>) -> Result<()> {
        let spec = VethSpec {
            peer_netns,
            ..spec.clone()
        };
        Socket::create_veth(self, &spec)
    }
    fn create_veth_described(
        &mut self,
        spec: &VethSpec<'_>,
        peer_netns: Option<&Netns>,
        peer_watch: &mut Socket,
    ) -> Result<Option<(Link, Link)>> {
        let spec = VethSpec {
            peer_netns,
            ..spec.clone()
        };
        Socket::create_veth_described(self, &spec, peer_watch)
    }
    fn set_link_alias(&mut self, index: u32, alias: &str) -> Result<()> {
        Socket::set_link_alias(self, index, alias)
    }

    // bridge

    fn ensure_bridge(&mut self, name: &str, opts: &BridgeOptions) -> Result<Link> {
        Socket::ensure_bridge(self, name, opts)
    }
    fn set_bridge_vlan_filtering(&mut self, name: &str, on: bool) -> Result<()> {
        let msg = rtnetlink::LinkBridge::new(name).vlan_filtering(on).build();
        self.request_ack(netlink_packet_route::RouteNetlinkMessage::NewLink(msg), 0)
    }
    fn set_link_promisc(&mut self, index: u32, on: bool) -> Result<()> {
        Socket::set_link_promisc(self, index, on)
    }
    fn set_bridge_port_flags(&mut self, index: u32, flags: &PortFlags) -> Result<()> {
        Socket::set_bridge_port_flags(self, index, flags)
    }
    fn bridge_vlan_add(&mut self, index: u32, vid: u16, pvid: bool, untagged: bool) -> Result<()> {
        Socket::bridge_vlan_add(self, index, vid, pvid, untagged)
    }
    fn bridge_vlan_del(&mut self, index: u32, vid: u16) -> Result<()> {
        Socket::bridge_vlan_del(self, index, vid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link_kinds::{macvlan_message, MacvlanSpec, NewLinkBase};
    use netlink_packet_route::link::MacVlanMode;

    #[test]
    fn a_netns_given_apart_lands_where_iproute2_puts_it() {
        let ns = Netns::current().unwrap();
        let spec = |netns| MacvlanSpec {
            base: NewLinkBase {
                name: "m0",
                parent: Some(2),
                netns,
                mtu: Some(1400),
                mac: None,
            },
            mode: MacVlanMode::Bridge,
            bc_queue_len: None,
        };
        let built_with = macvlan_message(&spec(Some(&ns)));
        let given_apart = born_in(macvlan_message(&spec(None)), &ns);
        assert_eq!(built_with, given_apart);
    }
}
