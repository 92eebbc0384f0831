//! ADD: bridge, veth pair (peer born in the container netns), port settings, spoof check,
//! IPAM, container addressing, gateway, masquerade. Every step registers its undo action, and a
//! failure runs them in reverse so nothing is left behind.

use std::time::{Duration, Instant};

use attach::ipam::Ipam;
use attach::link;
use attach::rollback::{self, Rollback};
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::{CniResult, Interface};
use libcni::skel::CmdArgs;
use netkit::bridge_port::PortFlags;
use netkit::kernel::SysctlWrite;
use netkit::link::{BridgeOptions, Link, VethSpec};
use netkit::netfilter::iptables::Family;
use netkit::netfilter::spoofcheck::SpoofChecker;
use netkit::packet_route::link::{InfoBridge, LinkFlags, State};
use netkit::sysfs::MacOrigin;
use netkit::{AddressOptions, Kernel, Netlink};

use crate::config::NetConf;
use crate::error::BridgeError;
use crate::gateway::{self, CONTAINER_IF_INDEX};
use attach::netfilter::Netfilter;

/// Attempts at finding a free random host veth name.
const VETH_NAME_ATTEMPTS: usize = 10;
/// How long the host veth may take to report operstate UP.
const PORT_UP_TIMEOUT: Duration = Duration::from_millis(2500);
/// How long IPv6 DAD may take when `enabledad` is set.
const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(5);

pub fn add<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, BridgeError> {
    let result = rollback::guarded("bridge", |rb| {
        let result = add_steps(kernel, ipam, nf, args, conf, rb)?;
        // The result must also be printable in the request's version (an L2 result has no IP
        // for 0.1.0/0.2.0): find out while the rollback can still undo everything.
        result.to_value(&args.cni_version)?;
        Ok(result)
    })?;
    Ok(result)
}

/// What the link-level part of an ADD made: the bridge, the veth pair between it and the
/// container, and the sockets and netns it went through.
struct Port<K: Kernel> {
    host: K::Socket,
    netns: K::Ns,
    cont: K::Socket,
    bridge: Link,
    host_veth: HostEnd,
    cont_link: Link,
}

fn add_steps<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, BridgeError> {
    // IPAM that never touches the container link runs alongside the bridge and veth setup;
    // the rest (dhcp) needs the link, so it runs once the veth exists, as in the reference.
    let (port, ipam_result) =
        ipam.add_alongside_if_set(args, &conf.ipam_type, CONTAINER_IF_INDEX, rb, |rb| {
            setup_port(kernel, nf, args, conf, rb).map_err(CniError::from)
        })?;
    let Port {
        mut host,
        netns,
        mut cont,
        bridge: br,
        host_veth,
        cont_link,
    } = port;

    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![
            Interface {
                name: br.name.clone(),
                mac: br.mac_string(),
                ..Default::default()
            },
            Interface {
                name: host_veth.name.clone(),
                // Read once the port is up, below.
                mac: String::new(),
                ..Default::default()
            },
            link::container_interface(&cont_link, &args.netns),
        ],
        ..Default::default()
    };

    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        result.dns = ipam_result.dns;
        let gws = gateway::calc(&mut result, conf)?;
        configure_container(
            kernel,
            &netns,
            &mut cont,
            cont_link.index,
            &args.ifname,
            &result,
            conf,
            (&mut host, host_veth.index),
        )?;

        if conf.is_gateway {
            setup_gateways(kernel, &mut host, &br, conf, &gws, &mut result)?;
        }
        if conf.ip_masq {
            let backend = conf
                .ip_masq_backend
                .unwrap_or_else(|| nf.default_masquerade_backend(&conf.network));
            let addrs: Vec<IpNetwork> = result.ips.iter().map(|i| i.address).collect();
            let (network, ifname, cid) = (
                conf.network.clone(),
                args.ifname.clone(),
                args.container_id.clone(),
            );
            let sources: Vec<std::net::IpAddr> = addrs.iter().map(IpNetwork::ip).collect();
            // Registered first: a partially applied setup is still torn down (this
            // attachment's jumps only: another interface's of the same network stay).
            let undo = nf.clone();
            rb.push("masquerade", move || {
                let families = [Family::V4, Family::V6];
                undo.teardown_masquerade(&network, &ifname, &cid, &families, &sources)
                    .map_err(|e| e.to_string())
            });
            nf.setup_masquerade(
                backend,
                &addrs,
                &conf.network,
                &args.ifname,
                &args.container_id,
            )?;
        }
    } else if !conf.disable_container_interface {
        bring_up_pair(&mut host, host_veth.index, &mut cont, cont_link.index)?;
    }

    let host_now = if conf.disable_container_interface {
        host.set_link_up(host_veth.index)?;
        host.link_by_index(host_veth.index)?
    } else {
        wait_port_up(&mut host, host_veth.index)?
    };
    result.interfaces[1].mac = host_now.mac_string();

    if let Some(dns) = &conf.dns {
        result.dns = dns.clone();
    }
    Ok(result)
}

/// The link-level part of an ADD, which does not depend on the addresses: the bridge (its
/// MAC pinned), the veth pair with its port settings, and the spoof check of the port.
fn setup_port<K: Kernel, F: Netfilter>(
    kernel: &K,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<Port<K>, BridgeError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;

    let bridge = setup_bridge(kernel, &mut host, conf)?;
    pin_bridge_mac(kernel, &mut host, &bridge)?;
    let (host_veth, cont_link) = setup_veth(
        kernel, &mut host, &mut cont, &netns, &bridge, args, conf, rb,
    )?;

    if conf.macspoofchk {
        let sc = SpoofChecker::new(
            &host_veth.name,
            &cont_link.mac_string(),
            &SpoofChecker::ref_id_for(&args.container_id, &args.ifname),
        );
        // Registered first: a partially applied setup is still torn down.
        let (undo, undo_sc) = (nf.clone(), sc.clone());
        rb.push("spoof check", move || {
            undo.remove_spoof_check(&undo_sc).map_err(|e| e.to_string())
        });
        nf.install_spoof_check(&sc)?;
    }
    Ok(Port {
        host,
        netns,
        cont,
        bridge,
        host_veth,
        cont_link,
    })
}

/// Pins the bridge's MAC to the one it has before this ADD's veth joins: an unpinned bridge
/// takes its lowest port's MAC, which would change as pods come and go and leave neighbours
/// with a stale entry for the gateway. A new bridge keeps its own random MAC (never a port's),
/// and a bridge that already existed keeps the MAC it has.
///
/// Only a bridge whose MAC is not pinned yet is pinned: setting a MAC, even the same one, makes
/// the kernel flush the device's ARP and neighbour entries (and the IPv4 route cache), so
/// pinning on every ADD (as the reference does) would make every pod re-resolve its neighbours
/// through the gateway each time another pod starts, and it is one more request under the RTNL
/// lock. Netlink does not say whether a MAC was set; sysfs does, when it shows this netns.
fn pin_bridge_mac<K: Kernel>(
    kernel: &K,
    host: &mut K::Socket,
    br: &Link,
) -> Result<(), BridgeError> {
    if kernel.host_mac_origin(br) == Some(MacOrigin::Set) {
        return Ok(());
    }
    if let Ok(mac) = <[u8; 6]>::try_from(br.mac.as_slice()) {
        host.set_link_mac(br.index, &mac)
            .map_err(BridgeError::PinMac)?;
    }
    Ok(())
}

/// Creates (or adopts) the bridge and brings it up, with promisc, VLAN filtering and
/// `accept_ra=0` as configured.
fn setup_bridge<K: Kernel>(
    kernel: &K,
    host: &mut K::Socket,
    conf: &NetConf,
) -> Result<Link, BridgeError> {
    let opts = BridgeOptions {
        mtu: (conf.mtu != 0).then_some(conf.mtu),
        vlan_filtering: conf.uses_vlans().then_some(true),
        ..Default::default()
    };
    let mut br = host.ensure_bridge(&conf.bridge, &opts).map_err(|e| {
        if conf.uses_vlans() && e.errno() == Some(libc::EOPNOTSUPP) {
            BridgeError::NoVlanFiltering(e)
        } else {
            BridgeError::Kernel(e)
        }
    })?;
    if conf.uses_vlans() && !br.bridge_info().contains(&InfoBridge::VlanFiltering(true)) {
        // An existing bridge without filtering would ignore the port VLANs entirely.
        host.set_bridge_vlan_filtering(&conf.bridge, true)
            .map_err(|e| {
                e.context(format!(
                    "failed to enable VLAN filtering on {:?}",
                    conf.bridge
                ))
            })?;
    }
    if conf.promisc && !br.is_promisc() {
        host.set_link_promisc(br.index, true)?;
    }
    // We own the routes of the bridge. The lookup's reply carries the current value, so a
    // bridge already at 0 costs no /proc/sys access; a reply without IPv6 configuration
    // (IPv6 disabled: the sysctl is absent too, which is fine) falls back to the sysctl.
    let accept_ra = format!("net/ipv6/conf/{}/accept_ra", conf.bridge);
    match br.ipv6_accept_ra() {
        Some(0) => {}
        Some(_) => {
            let _ = kernel.host_sysctl_write(&accept_ra, "0");
        }
        None => {
            let _ = kernel.host_sysctl_write_if_different(&accept_ra, "0");
        }
    }
    if !br.flags.contains(LinkFlags::Up) {
        host.set_link_up(br.index)?;
        br = host.link_by_index(br.index)?;
    }
    Ok(br)
}

/// Creates the veth pair with the container end born inside the netns and the host end
/// already enslaved and up, then applies the port settings.
#[allow(clippy::too_many_arguments)]
fn setup_veth<K: Kernel>(
    kernel: &K,
    host: &mut K::Socket,
    cont: &mut K::Socket,
    netns: &K::Ns,
    br: &Link,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<(HostEnd, Link), BridgeError> {
    let mut host_name = String::new();
    let mut described = None;
    for attempt in 0..VETH_NAME_ATTEMPTS {
        let candidate = link::random_veth_name()?;
        let spec = VethSpec {
            name: &candidate,
            peer_name: &args.ifname,
            mtu: (conf.mtu != 0).then_some(conf.mtu),
            peer_mac: conf.mac,
            master: Some(br.index),
            // Both ends start down and come up together once the container end is configured
            // ([`bring_up_pair`]).
            up: false,
            ..Default::default()
        };
        match host.create_veth_described(&spec, Some(netns), cont) {
            Ok(ends) => {
                host_name = candidate;
                described = ends;
                break;
            }
            Err(e) if e.is_exists() => {
                if cont.find_link(&args.ifname)?.is_some() {
                    return Err(BridgeError::VethNameTaken(args.ifname.clone()));
                }
                if attempt + 1 == VETH_NAME_ATTEMPTS {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    link::undo_delete_host_with(kernel, rb, &host_name);

    // Described by the kernel as it made them, the ends need no lookup (each one a turn at
    // the RTNL lock, which the node's concurrent ADDs queue for).
    let (index, cont_link) = match described {
        Some((here, peer)) => (here.index, peer),
        None => {
            let cont_link = cont.link_by_name(&args.ifname)?;
            // The host end's index is the container end's IFLA_LINK: a lookup of the host
            // end settles its pending carrier event there and then, which costs an RCU grace
            // period under the RTNL lock when the end is up without its peer.
            let index = match cont_link.link {
                Some(index) => index,
                None => host.link_by_name(&host_name)?.index,
            };
            (index, cont_link)
        }
    };
    let host_veth = HostEnd {
        name: host_name,
        index,
    };
    // The host end never autoconfigures IPv6 from router advertisements.
    let _ = kernel.host_sysctl_write(&format!("net/ipv6/conf/{}/accept_ra", host_veth.name), "0");

    // A new port has hairpin and isolation off: only send what differs.
    if conf.hairpin || conf.port_isolation {
        let flags = PortFlags {
            hairpin: Some(conf.hairpin),
            isolated: Some(conf.port_isolation),
            learning: None,
        };
        host.set_bridge_port_flags(host_veth.index, &flags)?;
    }
    if conf.uses_vlans() {
        setup_port_vlans(host, br, host_veth.index, conf)?;
    }
    Ok((host_veth, cont_link))
}

/// The host end of the pod's veth. Its MAC goes into the result once the port is up.
struct HostEnd {
    name: String,
    index: u32,
}

/// The bridge's default PVID (what a new port is given), 1 unless configured otherwise.
fn default_pvid(br: &Link) -> u16 {
    br.bridge_info()
        .iter()
        .find_map(|i| {
            if let InfoBridge::VlanDefaultPvid(p) = i {
                Some(*p)
            } else {
                None
            }
        })
        .unwrap_or(1)
}

fn setup_port_vlans<S: Netlink>(
    host: &mut S,
    br: &Link,
    port: u32,
    conf: &NetConf,
) -> Result<(), BridgeError> {
    let native = conf.native_vlan();
    if !conf.preserve_default_vlan {
        // A new port holds exactly the bridge's default PVID.
        let pvid = default_pvid(br);
        if pvid != 0 && pvid != native {
            host.bridge_vlan_del(port, pvid)?;
        }
    }
    for vid in conf.trunk.iter().flatten().filter(|v| **v != native) {
        host.bridge_vlan_add(port, *vid, false, false)?;
    }
    if native != 0 {
        host.bridge_vlan_add(port, native, true, true)?;
    }
    Ok(())
}

/// Sysctls, addresses, link up (with the host end: `host`) and routes inside the container
/// netns.
#[allow(clippy::too_many_arguments)]
fn configure_container<K: Kernel>(
    kernel: &K,
    netns: &K::Ns,
    cont: &mut K::Socket,
    index: u32,
    ifname: &str,
    result: &CniResult,
    conf: &NetConf,
    host: (&mut K::Socket, u32),
) -> Result<(), BridgeError> {
    let ours: Vec<IpNetwork> = result
        .ips
        .iter()
        .filter(|i| i.interface == Some(CONTAINER_IF_INDEX))
        .map(|i| i.address)
        .collect();
    let has_v6 = ours.iter().any(IpNetwork::is_ipv6);
    let keys = ContainerSysctls::new(ifname);
    let write = |key, value, only_if_different| SysctlWrite {
        key,
        value,
        only_if_different,
    };
    let mut writes = Vec::with_capacity(5);
    if has_v6 {
        writes.push(write(&keys.disable_ipv6, "0", true));
        writes.push(write(&keys.keep_addr_on_down, "1", true));
    }
    if conf.enable_dad {
        writes.push(write(&keys.enhanced_dad, "1", false));
        writes.push(write(&keys.accept_dad, "1", false));
    } else {
        // Without DAD the addresses are usable the moment ADD returns.
        writes.push(write(&keys.accept_dad, "0", false));
    }
    writes.push(write(&keys.arp_notify, "1", false));
    // Each write's failure is ignored as in the reference: IPv6 may be disabled in the netns.
    kernel.sysctl_write_all(netns, &writes)?;

    for addr in &ours {
        cont.add_address(index, *addr, &AddressOptions::default())?;
    }
    bring_up_pair(host.0, host.1, cont, index)?;
    if conf.enable_dad && has_v6 {
        wait_dad(cont, index, ifname)?;
    }

    for r in &result.routes {
        let v6 = r.dst.is_ipv6();
        let gw = r.gw.or_else(|| {
            result
                .ips
                .iter()
                .filter(|i| i.address.is_ipv6() == v6)
                .find_map(|i| i.gateway)
        });
        let mut route = netkit::Route::new(r.dst).dev(index);
        if let Some(gw) = gw {
            route = route.via(gw);
        }
        route.priority = r.priority;
        route.mtu = r.mtu;
        route.advmss = r.advmss;
        route.table = r.table;
        // Beside another network's route to the same destination, as in attach::configure.
        match cont.prepend_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(BridgeError::AddRoute {
                    dst: r.dst,
                    gateway: gw,
                    ifname: ifname.to_string(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}

/// Waits until no IPv6 address of the link is tentative (DAD done) or DAD failed.
fn wait_dad<S: Netlink>(cont: &mut S, index: u32, ifname: &str) -> Result<(), BridgeError> {
    use netkit::packet_route::address::AddressFlags;
    let start = Instant::now();
    loop {
        let addrs = cont.addresses(Some(index), netkit::Family::V6)?;
        if let Some(bad) = addrs
            .iter()
            .find(|a| a.flags.contains(AddressFlags::Dadfailed))
        {
            return Err(BridgeError::DadFailed {
                address: bad.address,
                ifname: ifname.to_string(),
            });
        }
        if !addrs
            .iter()
            .any(|a| a.flags.contains(AddressFlags::Tentative))
        {
            return Ok(());
        }
        if start.elapsed() > DAD_TIMEOUT {
            return Err(BridgeError::DadTimeout {
                ifname: ifname.to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Gateway addresses on the bridge (or the VLAN gateway interface) and forwarding.
fn setup_gateways<K: Kernel>(
    kernel: &K,
    host: &mut K::Socket,
    br: &Link,
    conf: &NetConf,
    gws: &gateway::Gateways,
    result: &mut CniResult,
) -> Result<(), BridgeError> {
    for (list, key) in [
        (&gws.v4, "net/ipv4/ip_forward"),
        (&gws.v6, "net/ipv6/conf/all/forwarding"),
    ] {
        for gw in list {
            let (index, name) = if conf.vlan != 0 {
                let link = ensure_vlan_gateway(host, br, conf)?;
                if !result.interfaces.iter().any(|i| i.name == link.name) {
                    result.interfaces.push(Interface {
                        name: link.name.clone(),
                        mac: link.mac_string(),
                        ..Default::default()
                    });
                }
                (link.index, link.name)
            } else {
                (br.index, br.name.clone())
            };
            gateway::ensure_addr(host, index, &name, *gw, conf.force_address)?;
        }
        if !list.is_empty() {
            kernel
                .host_sysctl_write_if_different(key, "1")
                .map_err(BridgeError::Forwarding)?;
        }
    }
    Ok(())
}

/// The L3 gateway of a VLAN: a veth whose end `<bridge>.<vlan>` holds the gateway address in the
/// host and whose other end is a bridge port with the VLAN as untagged PVID. Shared by every
/// pod of the VLAN, so it is never deleted (like the bridge).
fn ensure_vlan_gateway<S: Netlink>(
    host: &mut S,
    br: &Link,
    conf: &NetConf,
) -> Result<Link, BridgeError> {
    let name = format!("{}.{}", br.name, conf.vlan);
    if let Some(link) = host.find_link(&name)? {
        return Ok(link);
    }
    let port = link::random_veth_name()?;
    let spec = VethSpec {
        name: &port,
        peer_name: &name,
        mtu: (br.mtu != 0).then_some(br.mtu),
        master: Some(br.index),
        up: true,
        // Not `peer_up`: the kernel refuses a veth pair whose peer is up at creation (ENOTCONN);
        // the gateway end is set up once the pair exists.
        ..Default::default()
    };
    match host.create_veth(&spec, None) {
        Ok(()) => {
            if let Err(e) = configure_vlan_gateway(host, br, conf, &port, &name) {
                // Half-configured, it would be adopted as it is by the next ADD: remove it.
                if let Err(undo) = host.delete_link_by_name(&port) {
                    eprintln!(
                        "bridge: could not remove the unfinished vlan gateway {port:?}: {undo}"
                    );
                }
                return Err(e);
            }
        }
        // Created concurrently by another ADD.
        Err(e) if e.is_exists() => {}
        Err(e) => return Err(BridgeError::VlanGateway { name, source: e }),
    }
    Ok(host.link_by_name(&name)?)
}

/// The bridge end of a new VLAN gateway gets the VLAN as untagged PVID, then the gateway end
/// is set up.
fn configure_vlan_gateway<S: Netlink>(
    host: &mut S,
    br: &Link,
    conf: &NetConf,
    port: &str,
    name: &str,
) -> Result<(), BridgeError> {
    let port_link = host.link_by_name(port)?;
    let vconf = NetConf {
        trunk: None,
        ..conf.clone()
    };
    setup_port_vlans(host, br, port_link.index, &vconf)?;
    let gateway = host.link_by_name(name)?;
    host.set_link_up(gateway.index)
        .map_err(|source| BridgeError::VlanGatewayUp {
            name: name.to_string(),
            source,
        })
}

/// Brings the pod's veth up: the host end, then at once the container end, which gives both
/// their carrier.
///
/// Why neither end is up before: the kernel turns a new veth's carrier off as it registers
/// each end, and queues a link-watch event for it. If that event is handled (by the link-watch
/// worker, or by the first RTM_GETLINK of the end) while the end is up without a carrier, the
/// kernel deactivates the end's queues and waits for an expedited RCU grace period, holding
/// the RTNL lock, so every other pod's ADD on the node waits as well. A host end created up
/// had exactly that, once per pod. Ends still down when their event is handled cost nothing;
/// brought up back to back, the host end is without a carrier only until the next request.
fn bring_up_pair<S: Netlink>(
    host: &mut S,
    host_index: u32,
    cont: &mut S,
    cont_index: u32,
) -> Result<(), BridgeError> {
    host.set_link_up(host_index)?;
    cont.set_link_up(cont_index)?;
    Ok(())
}

/// Polls until the host veth reports operstate UP (its peer is up), like the reference's
/// retries but at a much finer interval.
fn wait_port_up<S: Netlink>(host: &mut S, index: u32) -> Result<Link, BridgeError> {
    let start = Instant::now();
    loop {
        let link = host.link_by_index(index)?;
        if link.operstate == State::Up {
            return Ok(link);
        }
        if start.elapsed() > PORT_UP_TIMEOUT {
            return Err(BridgeError::PortNotUp(link.operstate));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The sysctl keys of the container interface that ADD writes.
struct ContainerSysctls {
    disable_ipv6: String,
    keep_addr_on_down: String,
    enhanced_dad: String,
    accept_dad: String,
    arp_notify: String,
}

impl ContainerSysctls {
    fn new(ifname: &str) -> ContainerSysctls {
        ContainerSysctls {
            disable_ipv6: format!("net/ipv6/conf/{ifname}/disable_ipv6"),
            keep_addr_on_down: format!("net/ipv6/conf/{ifname}/keep_addr_on_down"),
            enhanced_dad: format!("net/ipv6/conf/{ifname}/enhanced_dad"),
            accept_dad: format!("net/ipv6/conf/{ifname}/accept_dad"),
            arp_notify: format!("net/ipv4/conf/{ifname}/arp_notify"),
        }
    }
}
